"""Charts of `gpufile bench` results: `python -m gpufile.plot sweep.csv -o sweep.png`.

Reads the CSV that `gpufile bench --csv` writes (one row per measurement) and draws throughput
against IO size, one line per series: the thread count, or the depth of a batch run (`-x 6`,
`-x 7`). Several CSV files draw on one chart, their names telling the series apart, which is
how two builds or two machines are compared. Needs matplotlib: `pip install 'gpufile[plot]'`.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from collections import OrderedDict
from typing import Iterable, Sequence

# What `gpufile bench --csv` writes (cli/bench/report.cpp, csv_header).
REQUIRED = ("io_type", "xfer", "threads", "io_depth", "io_size_bytes", "gib_per_s", "iops")

METRICS = {
    "gib_per_s": "throughput (GiB/s)",
    "iops": "IOPS (operations/s)",
    "p50_us": "median latency (µs)",
    "p99_us": "p99 latency (µs)",
}


class PlotError(Exception):
    """A CSV file that is not what `gpufile bench --csv` writes, or nothing to draw."""


def read_rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise PlotError(f"{path}: not a `gpufile bench --csv` file (no column {', '.join(missing)})")
        rows = list(reader)
    if not rows:
        raise PlotError(f"{path}: no measurements")
    return rows


def series_name(row: dict, prefix: str = "") -> str:
    depth = int(row["io_depth"])
    name = f"depth {depth}" if depth > 1 else f"{row['threads']} thread" + ("" if row["threads"] == "1" else "s")
    return f"{prefix}{name}"


def series(files: Sequence[str], metric: str) -> "OrderedDict[str, list[tuple[float, float]]]":
    """{series name: [(IO size in bytes, value)] sorted by size}, in the order first measured."""
    out: "OrderedDict[str, list[tuple[float, float]]]" = OrderedDict()
    for path in files:
        prefix = f"{os.path.basename(path)}: " if len(files) > 1 else ""
        for row in read_rows(path):
            if metric not in row:
                raise PlotError(f"{path}: no column {metric}")
            try:
                point = (float(row["io_size_bytes"]), float(row[metric]))
            except ValueError as e:
                raise PlotError(f"{path}: a value is not a number: {e}") from None
            out.setdefault(series_name(row, prefix), []).append(point)
    for points in out.values():
        points.sort()
    return out


def size_label(n: float) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)}{unit}"
    return f"{int(n)}" if n == int(n) else f"{n:g}"


def title_of(files: Sequence[str]) -> str:
    first = read_rows(files[0])[0]
    return f"gpufile bench: {first['io_type']}, {first['xfer']}"


def draw(files: Sequence[str], output: str, metric: str = "gib_per_s", title: str | None = None) -> None:
    """Draws the chart of `files` into `output` (the format follows its extension)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        raise PlotError("matplotlib is needed: pip install 'gpufile[plot]'") from None
    if metric not in METRICS:
        raise PlotError(f"unknown metric {metric}: one of {', '.join(METRICS)}")
    lines = series(files, metric)
    fig, ax = plt.subplots(figsize=(9.6, 6.0), dpi=100)
    sizes: set = set()
    for name, points in lines.items():
        xs, ys = zip(*points)
        sizes.update(xs)
        ax.plot(xs, ys, marker="o", label=name)
    if len(sizes) > 1:
        ax.set_xscale("log", base=2)
    ticks = sorted(sizes)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([size_label(t) for t in ticks])
    ax.set_xlabel("IO size (bytes)")
    ax.set_ylabel(METRICS[metric])
    ax.set_ylim(bottom=0)
    ax.set_title(title or title_of(files))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpufile.plot", description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", help="CSV files written by `gpufile bench --csv`")
    ap.add_argument("-o", "--output", required=True, help="the chart file (.png, .svg, .pdf)")
    ap.add_argument("--metric", default="gib_per_s", choices=sorted(METRICS),
                    help="what the y axis shows (default: gib_per_s)")
    ap.add_argument("--title", help="the chart's title (default: the IO and transfer type)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    try:
        draw(args.csv, args.output, args.metric, args.title)
    except (PlotError, OSError) as e:
        print(f"gpufile.plot: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
