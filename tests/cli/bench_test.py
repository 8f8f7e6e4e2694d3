#!/usr/bin/env python3
"""End-to-end checks of `gpufile bench` (gdsio-compatible benchmark).

usage: bench_test.py GPUFILE [--quick]

Runs the CLI binary as a user would and checks what it prints: the gdsio result line for every
transfer type, the verification pass, --json, corruption detection, the progress line, sweeps
with their CSV files, -i MIN:MAX:STEP ranges, job files (and the shipped examples),
and flag errors. With the CUDA driver test
double the "GPU" buffers are the double's device memory; --quick is the smaller set run with
no driver at all, where host memory stands in for the GPU.
"""
import csv
import json
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "bench")

MIB = 1 << 20
FILE_SIZE = 8 * MIB
THREADS = 2
LABELS = {0: "GPUD", 1: "CPUONLY", 2: "CPU_GPU", 3: "CPU_ASYNC_GPU", 4: "CPU_CACHED_GPU",
          5: "GPUD_ASYNC", 6: "GPU_BATCH", 7: "GPU_BATCH_STREAM"}
BATCH_TYPES = (6, 7)

RESULT_LINE = re.compile(
    r"^IoType: (?P<io>READ|WRITE|RANDREAD|RANDWRITE) XferType: (?P<xfer>\S+) "
    r"Threads: (?P<threads>\d+)(?: IoDepth: (?P<depth>\d+))? "
    r"DataSetSize: (?P<done>\d+)/(?P<total>\d+)\(KiB\) IOSize: (?P<io_kib>\d+)\(KiB\) "
    r"Throughput: (?P<gibps>\d+\.\d{6}) GiB/sec, Avg_Latency: (?P<lat>\d+\.\d{6}) usecs "
    r"ops: (?P<ops>\d+) total_time (?P<secs>\d+\.\d{6}) secs$")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def bench(*args):
    return subprocess.run([GPUFILE, "bench", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def json_document(run):
    """--json: standard output is exactly one JSON document; returns it ({} when it is not)."""
    try:
        doc = json.loads(run.stdout)
    except ValueError:
        check(False, f"--json prints one JSON document on stdout:\n{run.stdout}")
        return {}
    check(isinstance(doc.get("results"), list) and isinstance(doc.get("ok"), bool),
          f"--json document has ok and results: {doc}")
    return doc


def json_results(run):
    return json_document(run).get("results", [])


def result_lines(out):
    found = [RESULT_LINE.match(l) for l in out.splitlines() if l.startswith("IoType:")]
    check(all(found), f"every result line parses:\n{out}")
    return [m for m in found if m]


def check_one_pass(m, xfer, io_size, what):
    """A pass without -T moves exactly the data set, in whole IOs, with the right labels."""
    done, total, ops = int(m["done"]), int(m["total"]), int(m["ops"])
    check(m["xfer"] == LABELS[xfer], f"{what}: label {m['xfer']}")
    check(done == total == FILE_SIZE // 1024, f"{what}: DataSetSize {done}/{total}")
    check(int(m["io_kib"]) * 1024 == io_size, f"{what}: IOSize {m['io_kib']}")
    check(ops * io_size == done * 1024, f"{what}: ops {ops} x IOSize != done")
    if xfer in BATCH_TYPES:
        check(m["threads"] == "1" and m["depth"] == str(THREADS), f"{what}: batch Threads/IoDepth")
    else:
        check(m["threads"] == str(THREADS) and m["depth"] is None, f"{what}: Threads")
    check(float(m["secs"]) > 0 and float(m["lat"]) > 0, f"{what}: time and latency > 0")


def write_then_read(path, xfer, io_size, random, extra=()):
    """-V write (with its built-in read-back), then a separate -V read of the same file."""
    writes, reads = (3, 2) if random else (1, 0)
    common = ["-f", path, "-s", FILE_SIZE, "-i", io_size, "-w", THREADS, "-x", xfer, "-k", 11, "-V",
              *extra]
    what = f"-x {xfer} -i {io_size} {'random' if random else 'sequential'} {' '.join(map(str, extra))}"
    w = bench(*common, "-I", writes)
    if not check(w.returncode == 0, f"{what}: write rc {w.returncode}: {w.stderr}"):
        return
    check("Verifying data" in w.stdout.splitlines(), f"{what}: 'Verifying data' line")
    lines = result_lines(w.stdout)
    want = ["RANDWRITE", "RANDREAD"] if random else ["WRITE", "READ"]
    check([m["io"] for m in lines] == want, f"{what}: IoTypes {[m['io'] for m in lines]}")
    for m in lines:
        check_one_pass(m, xfer, io_size, what)
    r = bench(*common, "-I", reads)
    if check(r.returncode == 0, f"{what}: read rc {r.returncode}: {r.stderr}"):
        for m in result_lines(r.stdout):
            check_one_pass(m, xfer, io_size, what + " read")


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def corruption_is_caught(path, xfer):
    """A flipped byte is found and named, whichever way the data travels."""
    block = 64 * 1024
    bad_block = 50 * block
    common = ["-f", path, "-s", FILE_SIZE, "-i", block, "-w", THREADS, "-x", xfer, "-V"]
    w = bench(*common, "-I", 1)
    check(w.returncode == 0, f"-x {xfer} corruption setup: {w.stderr}")
    flip_byte(path, bad_block + 1234)
    r = bench(*common, "-I", 0)
    check(r.returncode not in (0, 2), f"-x {xfer} corrupt read: rc {r.returncode}")
    check("verification failed" in r.stderr and f"offset {bad_block}" in r.stderr,
          f"-x {xfer} corrupt read names the offset: {r.stderr}")


def stale_data_is_caught(path):
    """Another seed's data reads as stale, even though every block is intact."""
    block = 64 * 1024
    w = bench("-f", path, "-s", FILE_SIZE, "-i", block, "-w", THREADS, "-I", 1, "-V", "-k", 1)
    r = bench("-f", path, "-s", FILE_SIZE, "-i", block, "-w", THREADS, "-I", 0, "-V", "-k", 2)
    check(r.returncode == 1 and "stale" in r.stderr, f"stale data: {r.returncode} {r.stderr}")


def slow_copies_still_land(path):
    """-x 3 queues each read's copy to the GPU on a stream and -x 7 queues whole batches of
    stream IO; with the driver double holding queued work back, the data a check looks at must
    still be the block just read (the check waits for the copy, the round for its stream)."""
    common = ["-f", path, "-s", FILE_SIZE, "-i", 256 * 1024, "-w", THREADS, "-V", "-k", 4]
    w = bench(*common, "-x", 0, "-I", 1)
    check(w.returncode == 0, f"slow copies setup: {w.stderr}")
    env = dict(os.environ, FAKECUDA_ASYNC_DELAY_US="300")
    for xfer in (3, 7):
        r = subprocess.run([GPUFILE, "bench", *map(str, common), "-x", str(xfer), "-I", "2"],
                           capture_output=True, text=True, timeout=60, env=env)
        check(r.returncode == 0, f"-x {xfer} with slow copies: {r.stderr}")


def slow_setup_is_not_timed(path):
    """Setting up the IO buffers (allocation, registration, the fill's copy) is done before the
    clock starts. With the driver double's copies held back 0.3 s, four lanes' fills take
    1.2 s: a -T 1 run once spent its whole second on them and reported ops: 0 (exit 0), as an
    H100 did with -w 16 -i 64M. Now the second starts after setup; every IO started in it
    counts, even one that ends after it, and the time runs until the last one ended. A one-IO
    run's time is that IO, not the setup before it."""
    env = dict(os.environ, FAKECUDA_ASYNC_DELAY_US="300000")

    def slow(*args):
        args = ["-f", path, "-x", 2, "-I", 0, "--json", *args]
        return subprocess.run([GPUFILE, "bench", *map(str, args)], capture_output=True,
                              text=True, timeout=60, env=env)
    t = slow("-s", FILE_SIZE, "-i", MIB, "-w", 4, "-T", 1)
    if check(t.returncode == 0, f"-T 1 with slow setup: rc {t.returncode}: {t.stderr}"):
        m = result_lines(t.stderr)[0]
        ops, done = int(m["ops"]), int(m["done"])
        check(ops > 0 and float(m["gibps"]) > 0, f"-T 1 with slow setup moves data: {m[0]}")
        check(done * 1024 == ops * MIB, f"-T 1 with slow setup: every IO counted: {m[0]}")
        doc = json_results(t)[0]
        check(doc["total_time_s"] * 1e6 + 1 >= doc["max_latency_us"],
              f"-T 1: the time runs until the last IO ended: {doc}")
    one = slow("-s", MIB, "-i", MIB, "-w", 1)
    if check(one.returncode == 0, f"one IO with slow setup: rc {one.returncode}: {one.stderr}"):
        doc = json_results(one)[0]
        check(doc["ops"] == 1 and doc["total_time_s"] - doc["max_latency_us"] / 1e6 < 0.15,
              f"one IO with slow setup: the time is the IO's, not the setup's: {doc}")


def start_at_gates_the_clock(path, tmp):
    """--start-at EPOCH: set-up first, then the clock starts at that moment (processes started
    together time the same stretch). A moment 1.5 s ahead: the process lasts at least until
    then and its one-IO run's time is the IO's, not the wait; a moment past: the run goes at
    once and says it began late; a job file takes it too; a bad value is a usage error."""
    import time
    at = time.time() + 1.5
    r = bench("-f", path, "-s", MIB, "-i", MIB, "-x", 0, "--json", "--start-at", f"{at:.3f}")
    ended = time.time()
    if check(r.returncode == 0, f"--start-at ahead: rc {r.returncode}: {r.stderr}"):
        check(ended >= at, f"--start-at ahead: the run ended {at - ended:.3f} s before the moment")
        doc = json_results(r)[0]
        check(doc["total_time_s"] < 1.0, f"--start-at: the wait is not timed: {doc['total_time_s']}")
        check("began late" not in r.stderr, f"--start-at ahead: no late note: {r.stderr}")
    late = bench("-f", path, "-s", MIB, "-i", MIB, "-x", 0, "--start-at", f"{time.time() - 5:.3f}")
    check(late.returncode == 0 and "began late" in late.stderr and result_lines(late.stdout),
          f"--start-at past: runs at once and says so: rc {late.returncode}: {late.stderr}")
    job = os.path.join(tmp, "start-at.gdsio")
    write_job_file(job, f"[global]\nxfer_type=0\nrw=read\nbs=1M\nsize=1M\n\n[one]\nfilename={path}\n")
    at = time.time() + 1.0
    r = bench("--start-at", f"{at:.3f}", job)
    check(r.returncode == 0 and time.time() >= at, f"--start-at with a job file: rc {r.returncode}: {r.stderr}")
    for bad in ("soon", "0", "-3", "1e400"):
        r = bench("-f", path, "-s", MIB, "-i", MIB, "--start-at", bad)
        check(r.returncode == 2 and "--start-at" in r.stderr, f"--start-at {bad}: rc {r.returncode}: {r.stderr}")


def per_thread_files_and_json(tmp):
    w = bench("-D", tmp, "-s", 4 * MIB, "-i", MIB, "-w", THREADS, "-x", 6, "-I", 1, "--json")
    check(w.returncode == 0, f"-D write: {w.stderr}")
    check(all(os.path.getsize(os.path.join(tmp, f"gdsio.{n}")) == 4 * MIB for n in range(THREADS)),
          "-D makes one file per thread")
    m = result_lines(w.stderr)[0]
    check(int(m["total"]) == THREADS * 4 * 1024, f"-D total is w x s: {m['total']}")
    doc = json_results(w)[0]
    for key in ("io_type", "xfer_type", "threads", "io_depth", "dataset_done_kib",
                "dataset_total_kib", "io_size_kib", "throughput_gib_s", "avg_latency_us", "ops",
                "total_time_s", "p50_latency_us", "p99_latency_us", "max_latency_us",
                "cpu_s_per_gib"):
        check(key in doc, f"json has {key}")
    check(doc.get("ops") == int(m["ops"]) and doc.get("io_depth") == THREADS, "json matches line")
    p50, p99, top = (doc.get(k, -1) for k in ("p50_latency_us", "p99_latency_us", "max_latency_us"))
    check(0 < p50 <= p99 <= top, "json percentiles ordered")
    t = bench("-D", tmp, "-s", 4 * MIB, "-i", MIB, "-w", THREADS, "-x", 1, "-I", 0, "-T", 1)
    m = result_lines(t.stdout)[0] if check(t.returncode == 0, f"-T read: {t.stderr}") else None
    if m:
        check(int(m["done"]) > int(m["total"]), f"-T wraps: {m['done']}/{m['total']}")
        check(0.9 < float(m["secs"]) < 3, f"-T 1 takes about a second: {m['secs']}")


def json_is_one_document(tmp):
    """--json, whatever the command: standard output is one JSON document with every result in
    the order measured (a -V write's read-back, each sweep point, each job with -J and then the
    jobs' total), and the result lines go to standard error; a failed run says ok: false."""
    path = os.path.join(tmp, "json-data")
    w = bench("-f", path, "-s", FILE_SIZE, "-i", MIB, "-w", THREADS, "-x", 0, "-I", 1, "-V", "--json")
    res = json_results(w)
    check(w.returncode == 0 and [(r["pass"], r["scope"], r["io_type"]) for r in res] ==
          [("measure", "run", "WRITE"), ("read_back", "run", "READ")],
          f"-V --json: the write, then its read-back: {res}")
    lines = result_lines(w.stderr)
    check(len(lines) == 2 and "Verifying data" in w.stderr, f"-V --json lines on stderr: {w.stderr}")
    if len(lines) == 2 and len(res) == 2:
        check(all(int(m["ops"]) == r["ops"] for m, r in zip(lines, res)), "json matches the lines")
    s = bench("-f", path, "-s", FILE_SIZE, "--sweep-io", "64K,1M", "--sweep-threads", "1,2",
              "-x", 0, "-I", 0, "--json")
    res = json_results(s)
    check(s.returncode == 0 and len(res) == 4 and all(r["scope"] == "run" for r in res) and
          [(r["io_size_kib"], r["threads"]) for r in res] == [(64, 1), (1024, 1), (64, 2), (1024, 2)],
          f"a sweep: one result per point, in order: {res}")
    job = write_job_file(os.path.join(tmp, "json.gdsio"), f"""[global]
xfer_type=0
rw=read
bs=1M
size={FILE_SIZE}
filename={path}
[one]
num_threads=1
[two]
num_threads=2
""")
    j = bench("-J", "--json", job)
    res = json_results(j)
    check(j.returncode == 0 and [(r["scope"], r.get("job")) for r in res] ==
          [("job", "one"), ("job", "two"), ("total", None)] and res[-1]["threads"] == 3,
          f"a job file with -J: each job, then the total: {res}")
    check(len(job_lines(j.stderr)) == 2 and len(result_lines(j.stderr)) == 1,
          f"job file lines on stderr: {j.stderr}")
    bad = bench("-f", os.path.join(tmp, "no-such-dir", "f"), "-s", FILE_SIZE, "-i", MIB, "-x", 0,
                "-I", 0, "--json")
    doc = json_document(bad)
    check(bad.returncode != 0 and doc.get("ok") is False and doc.get("results") == [],
          f"a failed run still prints the document, ok false: rc {bad.returncode}: {doc}")


def run_on_pty(args):
    """Starts bench with a pseudo-terminal as stderr, stdout a pipe; returns (process, reader)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([GPUFILE, "bench", *map(str, args)], stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)

    def read_all():
        data = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO once the child closed its side
                break
            if not chunk:
                break
            data += chunk
        os.close(master)
        return data.decode(errors="replace")
    return p, read_all


def progress_line(path):
    """A run over 2 s shows a live line on stderr (forced, or because stderr is a terminal),
    erased before the result; stdout only ever has the result line."""
    common = ["-f", path, "-s", FILE_SIZE, "-i", 64 * 1024, "-x", 1, "-I", 0, "-T", 3]
    # The four runs at once, to keep the test short.
    piped = subprocess.Popen([GPUFILE, "bench", *map(str, common)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Bytes, not text: text mode would turn the \r into newlines.
    forced = subprocess.Popen([GPUFILE, "bench", *map(str, common), "--progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    on_tty, read_tty = run_on_pty(common)
    off_tty, read_off = run_on_pty(common + ["--no-progress"])
    out, err = (b.decode() for b in forced.communicate(timeout=60))
    tty_err, off_err = read_tty(), read_off()
    on_tty.wait(timeout=60)
    off_tty.wait(timeout=60)
    progress = re.compile(r"\rREAD \d+ s  \d+\.\d\d GiB done  \d+\.\d\d GiB/s  \d+ ops")
    check(forced.returncode == 0 and len(result_lines(out)) == 1, f"--progress run: {err!r}")
    check(out.startswith("IoType:") and "\r" not in out and "GiB done" not in out,
          f"no progress on stdout: {out!r}")
    check(progress.search(err), f"--progress shows the line on stderr: {err!r}")
    check(re.search(r"\r +\r$", err), f"the line is erased at the end: {err!r}")
    check(progress.search(tty_err), f"a terminal gets the line by default: {tty_err!r}")
    check("GiB done" not in off_err, f"--no-progress: {off_err!r}")
    check("GiB done" not in piped.communicate(timeout=60)[1].decode(),
          "no line by default when stderr is a pipe")


CSV_COLUMNS = ["io_type", "xfer", "threads", "io_depth", "io_size_bytes", "gib_per_s", "iops",
               "avg_latency_us", "p50_us", "p99_us", "max_us", "cpu_s_per_gib", "bytes",
               "seconds"]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def sweeps(tmp):
    """One measurement per (IO size, threads), each with its result line, then a CSV row
    per measurement; random and batch sweeps too. (Charts: python -m gpufile.plot, tested in
    tests/python/test_plot.py.)"""
    path = os.path.join(tmp, "sweep")
    out_csv = os.path.join(tmp, "sweep.csv")
    sizes, threads = [64 * 1024, 256 * 1024, MIB], [1, 2]
    r = bench("-f", path, "-s", FILE_SIZE, "-x", 0, "-I", 1, "-V", "--sweep-io", "64K,256K,1M",
              "--sweep-threads", "1,2", "--csv", out_csv)
    if not check(r.returncode == 0, f"sweep: rc {r.returncode}: {r.stderr}"):
        return
    lines = result_lines(r.stdout)
    grid = [(t, io) for t in threads for io in sizes]
    check([m["io"] for m in lines] == ["WRITE", "READ"] * len(grid),
          f"sweep: a -V write and its read-back per point: {[m['io'] for m in lines]}")
    check([(int(m["threads"]), int(m["io_kib"]) * 1024) for m in lines[::2]] == grid,
          "sweep: points in order, thread counts outermost")
    rows = read_csv(out_csv)
    with open(out_csv) as f:
        header = f.readline().strip().split(",")
    check(header == CSV_COLUMNS, f"csv header: {header}")
    check([(int(row["threads"]), int(row["io_size_bytes"])) for row in rows] == grid,
          f"csv: one row per point: {rows}")
    for row, m in zip(rows, lines[::2]):
        check(row["io_type"] == "WRITE" and row["xfer"] == "GPUD" and row["io_depth"] == "1",
              f"csv labels: {row}")
        check(int(row["bytes"]) == FILE_SIZE and float(row["seconds"]) > 0, f"csv bytes: {row}")
        check(abs(float(row["gib_per_s"]) - float(m["gibps"])) < 1e-6, "csv GiB/s = line")
        check(float(row["iops"]) > 0 and
              0 < float(row["p50_us"]) <= float(row["p99_us"]) <= float(row["max_us"]),
              f"csv iops and percentiles: {row}")
    check(not [n for n in os.listdir(tmp) if ".tmp." in n], "no temporary files left")

    # Random IO and a batch type: --sweep-threads alone, -i fixed; depth in io_depth.
    r = bench("-f", path, "-s", FILE_SIZE, "-i", "256K", "-x", 7, "-I", 2, "--sweep-threads",
              "2,4", "--csv", out_csv)
    check(r.returncode == 0 and len(result_lines(r.stdout)) == 2, f"batch sweep: {r.stderr}")
    rows = read_csv(out_csv)
    check([(row["io_type"], row["xfer"], row["threads"], row["io_depth"]) for row in rows] ==
          [("RANDREAD", "GPU_BATCH_STREAM", "1", "2"), ("RANDREAD", "GPU_BATCH_STREAM", "1", "4")],
          f"batch sweep rows: {rows}")


def unwritable_output_fails_first(tmp):
    """An unwritable --csv is an error before anything runs: the write never starts. --png is
    gone (charts are drawn by python -m gpufile.plot): refused with a pointer there."""
    never = os.path.join(tmp, "never-written")
    r = bench("-f", never, "-s", FILE_SIZE, "-i", MIB, "-I", 1, "--sweep-io", "64K,1M",
              "--csv", os.path.join(tmp, "no-such-dir", "out"))
    check(r.returncode == 1 and "cannot write --csv" in r.stderr,
          f"--csv unwritable: rc {r.returncode}: {r.stderr}")
    check("IoType:" not in r.stdout and not os.path.exists(never), "--csv unwritable: nothing ran")
    r = bench("-f", never, "-s", FILE_SIZE, "-i", MIB, "-I", 1, "--csv", tmp)
    check(r.returncode == 1 and "directory" in r.stderr, f"--csv DIR: {r.stderr}")
    r = bench("-f", never, "-s", FILE_SIZE, "-i", MIB, "-I", 1, "--png", os.path.join(tmp, "c.png"))
    check(r.returncode == 2 and "python -m gpufile.plot" in r.stderr and not os.path.exists(never),
          f"--png refused with a pointer to gpufile.plot: rc {r.returncode}: {r.stderr}")


def bad_flags_give_usage(path):
    cases = [["-f", path, "-s", "8M", "-i", "64K", "-Z"],          # unknown flag
             ["-f", path, "-i", "64K"],                            # no size
             ["-f", path, "-s", "8M", "-i", "64K", "-x", "8"],     # no such type
             ["-f", path, "-s", "8M", "-i", "64K", "-x", "-1"],
             ["-f", path, "-s", "8M", "-i", "64K", "-x", "7", "-w", "129"],  # batch too deep
             ["-f", path, "-s", "8M", "-i", "64K", "-I", "4"],
             ["-f", path, "-D", os.path.dirname(path), "-s", "8M", "-i", "64K"],
             ["-f", path, "-s", "lots", "-i", "64K"],
             ["-f", path, "-s", "8M", "-i"],
             ["-f", path, "-s", "8M", "--sweep-io", "4K,,1M"],
             ["-f", path, "-s", "8M", "--sweep-io", "4K,0"],
             ["-f", path, "-s", "8M", "-i", "64K", "--sweep-threads", "1,x"],
             ["-f", path, "-s", "8M", "--sweep-threads", "1,2"],      # no IO size at all
             ["-f", path, "-s", "8M", "-i", "64K", "-x", "6", "--sweep-threads", "8,256"],
             ["-f", path, "-s", "8M", "-i", "64K", "-m", "5"],
             ["-f", path, "-s", "8M", "-i", "64K", "-m", "2", "-x", "1"],  # gdsio: -m with 0, 5-7
             ["-f", path, "-s", "8M", "-i", "64K", "-m", "3", "-x", "4"]]
    for args in cases:
        r = bench(*args)
        check(r.returncode == 2 and "usage:" in r.stderr, f"{args}: rc {r.returncode}")
    r = bench("-f", path, "-s", "8M", "-i", "64K", "-x", "9")
    check("-x 9: no such transfer type" in r.stderr, f"-x 9 is named: {r.stderr}")
    for m in ("1", "4"):  # gdsio's cuMem VMM and mmap buffers
        r = bench("-f", path, "-s", "8M", "-i", "64K", "-m", m)
        check(r.returncode == 2 and "not implemented" in r.stderr, f"-m {m}: {r.stderr}")
    h = bench("-h")
    check(h.returncode == 0, "-h exits 0")
    names = ["GPU_DIRECT", "CPU_ONLY", "CPU_GPU", "CPU_ASYNC_GPU", "CPU_CACHED_GPU",
             "GPU_DIRECT_ASYNC", "GPU_BATCH", "GPU_BATCH_STREAM"]
    check(all(f"{n} {name} " in h.stdout for n, name in enumerate(names)),
          "-h lists the eight transfer types")


def mean_io_kib(m):
    """The IOSize a run with varying sizes prints: the mean IO, rounded down to whole KiB."""
    return int(m["done"]) * 1024 // int(m["ops"]) // 1024


def io_size_ranges(path, xfers):
    """-i MIN:MAX:STEP: every IO's size is drawn from the series; a -V write's read-back, and a
    later -V read (sequential or random), meet exactly the blocks the write left, whatever the
    transfer type. IOSize is the mean IO, so ops x IOSize is still about the data moved."""
    for xfer in xfers:
        for random in (False, True):
            what = f"-i 4K:256K:4K -x {xfer} {'random' if random else 'sequential'}"
            common = ["-f", path, "-s", FILE_SIZE, "-i", "4K:256K:4K", "-w", THREADS, "-x", xfer,
                      "-k", 5, "-V"]
            w = bench(*common, "-I", 3 if random else 1)
            if not check(w.returncode == 0, f"{what}: write rc {w.returncode}: {w.stderr}"):
                continue
            lines = result_lines(w.stdout)
            want = ["RANDWRITE", "RANDREAD"] if random else ["WRITE", "READ"]
            check([m["io"] for m in lines] == want, f"{what}: IoTypes {[m['io'] for m in lines]}")
            for m in lines:
                done, total, ops = int(m["done"]), int(m["total"]), int(m["ops"])
                check(done == total == FILE_SIZE // 1024, f"{what}: DataSetSize {done}/{total}")
                check(FILE_SIZE // (256 * 1024) < ops < FILE_SIZE // 4096, f"{what}: ops {ops}")
                check(int(m["io_kib"]) == mean_io_kib(m),
                      f"{what}: IOSize {m['io_kib']} is not the mean")
            r = bench(*common, "-I", 2 if random else 0)
            check(r.returncode == 0 and len(result_lines(r.stdout)) == 1,
                  f"{what}: -V read rc {r.returncode}: {r.stderr}")


def io_size_range_details(tmp):
    """A read with other sizes than the write finds misplaced blocks; --json shows the range;
    -x 6 and -D take ranges too; the page cache takes sizes O_DIRECT would refuse."""
    path = os.path.join(tmp, "ranges")
    common = ["-f", path, "-s", FILE_SIZE, "-w", THREADS, "-k", 5, "-V"]
    w = bench(*common, "-i", "4K:256K:4K", "-I", 1, "--json")
    check(w.returncode == 0, f"range write: {w.stderr}")
    docs = json_results(w)
    check(docs and docs[0].get("io_size_min_kib") == 4 and docs[0].get("io_size_max_kib") == 256,
          f"json shows the range: {docs}")
    r = bench(*common, "-i", "64K", "-I", 0)
    check(r.returncode == 1 and "verification failed" in r.stderr,
          f"a fixed -i read of a range-written file fails: rc {r.returncode}: {r.stderr}")
    d = bench("-D", tmp, "-s", FILE_SIZE, "-i", "16K:128K:16K", "-w", THREADS, "-x", 6, "-I", 3,
              "-V")
    lines = result_lines(d.stdout) if check(d.returncode == 0, f"-D -x 6 range: {d.stderr}") else []
    check([m["depth"] for m in lines] == [str(THREADS)] * 2, f"-x 6 range depth: {d.stdout}")
    b = bench("-f", path, "-s", FILE_SIZE, "-i", "6K:30K:2K", "-O", 1, "-I", 1, "-V")
    check(b.returncode == 0, f"-O 1 takes a 2 KiB step: rc {b.returncode}: {b.stderr}")


def bad_io_ranges_give_usage(path):
    cases = {"4K:1K:1K": "larger than MAX", "4K:64K": "MIN:MAX:STEP",
             "4K:64K:4K:4K": "MIN:MAX:STEP", "0:64K:4K": "MIN", "4K:64K:0": "STEP",
             "4K:64K:24K": "whole steps", "4K:12K:2K": "4 KiB", "x:y:z": "not a size"}
    for text, says in cases.items():
        r = bench("-f", path, "-s", "8M", "-i", text)
        check(r.returncode == 2 and "usage:" in r.stderr and says in r.stderr,
              f"-i {text}: rc {r.returncode}: {r.stderr[:200]}")
    r = bench("-f", path, "-s", "8M", "-i", "32", "-O", 1, "-V")
    check(r.returncode == 2 and "block header" in r.stderr,
          f"-V with 32-byte IOs: {r.stderr[:200]}")
    r = bench("-f", path, "-s", "4K:8K:4K", "-i", "4K")
    check(r.returncode == 2, f"-s takes no range: rc {r.returncode}")


JOB_LINE = re.compile(r"^\[(?P<job>[^\]]+)\] (?P<line>IoType: .*)$")


def job_lines(out):
    """{job: match} of the -J lines ("[job] IoType: ..."), in order."""
    found = {}
    for l in out.splitlines():
        j = JOB_LINE.match(l)
        if j:
            m = RESULT_LINE.match(j["line"])
            check(m, f"-J line parses: {l}")
            found[j["job"]] = m
    return found


def write_job_file(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def bench_env(*args, **env):
    return subprocess.run([GPUFILE, "bench", *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **env))


def job_files(tmp):
    """gdsio job files: the jobs run at once and one line sums them up (Threads, DataSetSize
    and ops add up); a job's key overrides [global]; do_verify writes then reads back; -J adds
    each job's own line first; batch jobs add their depths."""
    a, b = os.path.join(tmp, "job-a"), os.path.join(tmp, "job-b")
    os.makedirs(a, exist_ok=True)
    os.makedirs(b, exist_ok=True)
    two = write_job_file(os.path.join(tmp, "two.gdsio"), f"""# two jobs side by side
[global]
name=two
xfer_type=0
rw=write
bs=64K
size=2M
do_verify=1

[job1]
num_threads=2
directory={a}

[job2]
gpu_dev_id=0
num_threads=1
bs=16K:128K:16K
directory={b}
""")
    r = bench(two)
    if not check(r.returncode == 0, f"job file: rc {r.returncode}: {r.stderr}"):
        return
    lines = result_lines(r.stdout)
    check([m["io"] for m in lines] == ["WRITE", "READ"] and "Verifying data" in r.stdout,
          f"job file: a write, then its read-back: {r.stdout}")
    check(not job_lines(r.stdout), "no per-job lines without -J")
    for m in lines:
        check(m["threads"] == "3" and m["xfer"] == "GPUD", f"job file: Threads {m['threads']}")
        check(int(m["done"]) == int(m["total"]) == 3 * 2048, f"job file: DataSetSize {m[0]}")
        check(int(m["io_kib"]) == mean_io_kib(m), f"job file: IOSize is the mean: {m[0]}")
    check(all(os.path.getsize(os.path.join(d, f"gdsio.{n}")) == 2 * MIB
              for d, n in ((a, 0), (a, 1), (b, 0))), "job file: one file per thread per job")

    j = bench("-J", two)
    write_part = j.stdout.split("Verifying data")[0]  # the write's lines, then the read-back's
    jobs = job_lines(write_part) if check(j.returncode == 0, f"-J: {j.stderr}") else {}
    check(list(jobs) == ["job1", "job2"] and list(job_lines(j.stdout)) == ["job1", "job2"],
          f"-J: a line per job: {j.stdout}")
    check(j.stdout.splitlines()[2].startswith("IoType: WRITE"), f"-J: jobs first: {j.stdout}")
    if len(jobs) == 2:
        total = result_lines(write_part)[0]
        check(jobs["job1"]["threads"] == "2" and jobs["job2"]["threads"] == "1", "-J threads")
        check(jobs["job1"]["io_kib"] == "64", f"-J job1 keeps [global]'s bs: {jobs['job1'][0]}")
        check(int(jobs["job1"]["ops"]) + int(jobs["job2"]["ops"]) == int(total["ops"]),
              "-J: the total's ops are the jobs' sum")
        check(max(float(jobs[k]["secs"]) for k in jobs) == float(total["secs"]),
              "-J: the total's time is the longest job's")

    timed = write_job_file(os.path.join(tmp, "timed.gdsio"), f"""[global]
rw=randread
bs=64K
size=2M
runtime=1
[job1]
num_threads=2
directory={a}
[job2]
directory={b}
""")
    t = bench(timed)
    m = result_lines(t.stdout)[0] if check(t.returncode == 0, f"timed jobs: {t.stderr}") else None
    if m:
        check(m["io"] == "RANDREAD" and int(m["done"]) > int(m["total"]), f"runtime wraps: {m[0]}")
        check(0.9 < float(m["secs"]) < 3, f"runtime=1 takes about a second: {m['secs']}")

    batch = write_job_file(os.path.join(tmp, "batch.gdsio"), f"""[global]
xfer_type=6
rw=read
bs=64K
size=2M
[job1]
num_threads=2
directory={a}
[job2]
num_threads=1
directory={b}
""")
    t = bench(batch)
    m = result_lines(t.stdout)[0] if check(t.returncode == 0, f"batch jobs: {t.stderr}") else None
    if m:
        check(m["xfer"] == "GPU_BATCH" and m["threads"] == "1" and m["depth"] == "3",
              f"batch jobs add their depths: {m[0]}")


def bad_job_files(tmp):
    """A bad job file is named with its line and exits 2 before anything runs."""
    base = "[global]\nrw=read\nbs=64K\nsize=1M\n"
    cases = [(base + "blocksize=4K\n[job1]\ndirectory=/d\n", ":5: unknown key 'blocksize'"),
             (base + "bs 4K\n", ":5: expected [section]"),
             (base + "[job1\n", ":5: malformed section header"),
             (base + "[job1]\n", ":5: [job1]: no directory or filename"),
             (base + "[job1]\ndirectory=/d\nrw=sideways\n", ":7: rw=sideways"),
             (base + "[job1]\ndirectory=/d\n[job2]\nrw=write\ndirectory=/e\n",
              ":8: rw=write in [job2] differs from rw=read in [job1]"),
             (base, ": no job section")]
    for k, (text, says) in enumerate(cases):
        path = write_job_file(os.path.join(tmp, f"bad{k}.gdsio"), text)
        r = bench(path)
        check(r.returncode == 2 and f"{path}{says}" in r.stderr and not r.stdout,
              f"bad job file {k}: rc {r.returncode}: {r.stderr}")
    r = bench(os.path.join(tmp, "missing.gdsio"))
    check(r.returncode == 2 and "cannot read the job file" in r.stderr, f"missing: {r.stderr}")
    r = bench("-s", "1M", os.path.join(tmp, "bad0.gdsio"))
    check(r.returncode == 2 and "only -J, --json and --start-at" in r.stderr, f"flags with a file: {r.stderr}")


def shipped_examples(tmp):
    """examples/bench/*.gdsio run as shipped, but small: directories in tmp, 1 MiB per thread,
    1 s, and two (test double) GPUs."""
    names = sorted(n for n in os.listdir(EXAMPLES) if n.endswith(".gdsio"))
    check(len(names) >= 2, f"examples shipped: {names}")
    dirs = {}

    def local_dir(shipped):
        """The same directory in tmp for the same shipped directory, across the examples."""
        return dirs.setdefault(shipped, os.path.join(tmp, f"ex{len(dirs)}"))
    for name in ["write-verify.gdsio"] + [n for n in names if n != "write-verify.gdsio"]:
        with open(os.path.join(EXAMPLES, name)) as f:
            text = f.read()
        text = re.sub(r"(?m)^size=.*$", "size=1M", text)
        text = re.sub(r"(?m)^runtime=.*$", "runtime=1", text)
        text = re.sub(r"(?m)^directory=(.*)$", lambda d: "directory=" + local_dir(d[1]), text)
        for d in dirs.values():
            os.makedirs(d, exist_ok=True)
        path = write_job_file(os.path.join(tmp, name), text)
        r = bench_env("-J", path, FAKECUDA_DEVICES="2")
        check(r.returncode == 0 and len(result_lines(r.stdout)) >= 1,
              f"example {name}: rc {r.returncode}: {r.stderr}")


def main():
    global GPUFILE
    GPUFILE = sys.argv[1]
    quick = "--quick" in sys.argv[2:]
    # The build tree rather than /tmp: /tmp may be tmpfs, which has no O_DIRECT.
    with tempfile.TemporaryDirectory(prefix="bench-test.", dir=os.getcwd()) as tmp:
        path = os.path.join(tmp, "data")
        for xfer in LABELS:
            for io_size in ([MIB] if quick else [64 * 1024, MIB]):
                for random in ([False] if quick else [False, True]):
                    write_then_read(path, xfer, io_size, random)
        for xfer in ([0] if quick else [0, 5, 6, 7]):  # -m: pinned and pageable host buffers
            for memory in (2, 3):
                write_then_read(path, xfer, MIB, False, ("-m", memory))
        io_size_ranges(path, [0, 2] if quick else list(LABELS))
        job_files(tmp)
        if quick:
            r = bench("-f", path, "-s", FILE_SIZE, "-i", MIB, "-x", 0)
            check("no GPU" in r.stderr, f"no-GPU note: {r.stderr}")
        else:
            for xfer in (0, 3, 4, 7):
                corruption_is_caught(path, xfer)
            stale_data_is_caught(path)
            slow_copies_still_land(path)
            slow_setup_is_not_timed(path)
            start_at_gates_the_clock(path, tmp)
            per_thread_files_and_json(tmp)
            json_is_one_document(tmp)
            progress_line(path)
            sweeps(tmp)
            unwritable_output_fails_first(tmp)
            bad_flags_give_usage(path)
            io_size_range_details(tmp)
            bad_io_ranges_give_usage(path)
            bad_job_files(tmp)
            shipped_examples(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
