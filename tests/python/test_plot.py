"""python -m gpufile.plot: charts from `gpufile bench --csv` files (matplotlib)."""
import struct
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

from gpufile import plot  # noqa: E402

HEADER = ("io_type,xfer,threads,io_depth,io_size_bytes,gib_per_s,iops,avg_latency_us,p50_us,"
          "p99_us,max_us,cpu_s_per_gib,bytes,seconds\n")


def bench_csv(path, rows):
    """A CSV as `gpufile bench --csv` writes it: rows of (threads, depth, io size, GiB/s)."""
    with open(path, "w") as f:
        f.write(HEADER)
        for threads, depth, size, gib in rows:
            f.write(f"READ,GPUD,{threads},{depth},{size},{gib},{gib * 2**30 / size},1,1,2,3,0.2,"
                    f"{2**30},1\n")
    return str(path)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "a PNG file"
    return struct.unpack(">II", head[16:24])


def test_one_line_per_thread_count_sorted_by_size(tmp_path):
    csv = bench_csv(tmp_path / "sweep.csv", [(1, 1, 1 << 20, 3.0), (1, 1, 65536, 1.0),
                                             (4, 1, 65536, 2.0), (4, 1, 1 << 20, 9.0)])
    lines = plot.series([csv], "gib_per_s")
    assert list(lines) == ["1 thread", "4 threads"]
    assert lines["1 thread"] == [(65536.0, 1.0), (1048576.0, 3.0)]
    assert lines["4 threads"] == [(65536.0, 2.0), (1048576.0, 9.0)]


def test_batch_runs_are_named_by_depth_and_files_by_name(tmp_path):
    a = bench_csv(tmp_path / "a.csv", [(1, 32, 4096, 0.5)])
    b = bench_csv(tmp_path / "b.csv", [(1, 32, 4096, 0.7)])
    assert list(plot.series([a, b], "iops")) == ["a.csv: depth 32", "b.csv: depth 32"]


def test_the_command_writes_a_png(tmp_path):
    csv = bench_csv(tmp_path / "sweep.csv", [(1, 1, 4096, 0.3), (1, 1, 1 << 20, 5.0),
                                             (8, 1, 4096, 1.1), (8, 1, 1 << 20, 20.0)])
    out = tmp_path / "sweep.png"
    r = subprocess.run([sys.executable, "-m", "gpufile.plot", csv, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png_size(out) == (960, 600)


def test_other_metrics_and_formats(tmp_path):
    csv = bench_csv(tmp_path / "s.csv", [(16, 1, 4096, 2.0)])
    out = tmp_path / "iops.svg"
    assert plot.main([csv, "-o", str(out), "--metric", "iops", "--title", "4 KiB"]) == 0
    assert b"<svg" in out.read_bytes()[:400]


def test_a_file_that_is_not_a_bench_csv_is_refused(tmp_path, capsys):
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    assert plot.main([str(bad), "-o", str(tmp_path / "x.png")]) == 1
    assert "not a `gpufile bench --csv` file" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    empty = tmp_path / "empty.csv"
    empty.write_text(HEADER)
    assert plot.main([str(empty), "-o", str(tmp_path / "y.png")]) == 1
    assert "no measurements" in capsys.readouterr().err
