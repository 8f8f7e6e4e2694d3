"""What `import gpufile` and `from gpufile.safetensors import load_file` cost a serving process:
the median wall time of each statement over N fresh interpreters that have already imported the
framework a serving process has (torch where it is installed, else numpy; --first picks), and
the modules each statement brings in that the framework had not. The statements alternate from
one interpreter to the next, so a machine that slows down during the run slows both alike.

    python bench/import_cost.py                  # 20 interpreters a statement, torch or numpy first
    python bench/import_cost.py --runs 50 --first none
    python bench/import_cost.py --importtime     # also the heaviest modules of one -X importtime run

The python running this script is the one measured (the installed gpufile package, as users get
it): run it with the virtual environment's python. GPUFILE_CUDA_LIBRARY and the other settings in
the environment pass to the interpreters measured. Speed claims come from GPU machine runs
(docs/performance.md), not from this script's output on another machine."""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

STATEMENTS = ("import gpufile", "from gpufile.safetensors import load_file")

# What each fresh interpreter runs: the framework, then the statement timed, then what it brought.
_CHILD = """
import sys, time
first = {first!r}
if first:
    __import__(first)
before = set(sys.modules)
c0, t0 = time.process_time(), time.perf_counter()
exec({statement!r})
t1, c1 = time.perf_counter(), time.process_time()
new = sorted(set(sys.modules) - before)
import json
print(json.dumps({{"seconds": t1 - t0, "cpu_seconds": c1 - c0, "new": new}}))
"""


def default_first():
    for name in ("torch", "numpy"):
        if importlib.util.find_spec(name) is not None:
            return name
    return ""


def _bytecode_note(python):
    """Whether the package's modules load from cached bytecode: a package installed with
    `pip install --no-compile` into a folder the process cannot write compiles every module at
    every import (tens of milliseconds for gpufile.safetensors), which is no import cost of
    gpufile's own."""
    code = ("import importlib.util, os, pkgutil, gpufile, gpufile.safetensors as st\n"
            "inside = ['gpufile.safetensors.' + m.name for m in pkgutil.iter_modules(getattr(st, '__path__', []))]\n"
            "for m in ['gpufile', 'gpufile.safetensors'] + inside:\n"
            "    spec = importlib.util.find_spec(m)\n"
            "    print(m, os.path.exists(importlib.util.cache_from_source(spec.origin)))")
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout
    cached = all(line.split()[-1] == "True" for line in out.splitlines())
    return ("bytecode: cached (.pyc present)" if cached else
            "bytecode: MISSING for some modules (compiled at every import): " + out.replace("\n", "; "))


def run_once(python, first, statement):
    out = subprocess.run([python, "-c", _CHILD.format(first=first, statement=statement)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def importtime_top(python, first, statement, top):
    """The modules with the largest cumulative time in one `-X importtime` run of the statement
    (the framework imported first, so its modules are not counted)."""
    code = (f"import {first}\n" if first else "") + "import sys; sys.stderr.write('--mark--\\n')\n" + statement
    err = subprocess.run([python, "-X", "importtime", "-c", code], check=True,
                         capture_output=True, text=True).stderr
    lines = err.split("--mark--\n", 1)[-1].splitlines()
    rows = []
    for line in lines:
        parts = line.split("|")
        if len(parts) == 3 and parts[0].startswith("import time:") and parts[1].strip().isdigit():
            rows.append((int(parts[1]), int(parts[0].split(":")[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    return rows[:top]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="fresh interpreters per statement (default 20)")
    p.add_argument("--first", default=None,
                   help="module imported before the statement: torch, numpy, none (default: torch if "
                        "installed, else numpy)")
    p.add_argument("--importtime", action="store_true",
                   help="also print the heaviest modules of one -X importtime run per statement")
    p.add_argument("--target-ms", type=float, default=10.0,
                   help="the median each statement should stay under (default 10; docs/performance.md)")
    args = p.parse_args()
    first = default_first() if args.first is None else ("" if args.first == "none" else args.first)

    python = sys.executable
    print(f"python {python} ({sys.version.split()[0]}); imported first: {first or 'nothing'}; "
          f"{args.runs} fresh interpreters a statement; "
          f"GPUFILE_CUDA_LIBRARY={os.environ.get('GPUFILE_CUDA_LIBRARY', '(unset)')}")
    print(_bytecode_note(python))
    times = {s: [] for s in STATEMENTS}
    cpu = {s: [] for s in STATEMENTS}
    new = {}
    for _ in range(args.runs):
        for s in STATEMENTS:
            r = run_once(python, first, s)
            times[s].append(r["seconds"] * 1e3)
            cpu[s].append(r["cpu_seconds"] * 1e3)
            new[s] = r["new"]
    for s in STATEMENTS:
        t = sorted(times[s])
        median = statistics.median(t)
        verdict = "within" if median <= args.target_ms else "OVER"
        # CPU time: what the statement itself computed, less sensitive than wall time to other
        # work on a shared machine
        print(f"{s:45s} median {median:6.2f} ms  min {t[0]:6.2f}  max {t[-1]:6.2f}  "
              f"cpu median {statistics.median(cpu[s]):6.2f} ms  ({verdict} {args.target_ms:g} ms)")
        print(f"  brings in {len(new[s])} modules: {' '.join(new[s])}")
        if args.importtime:
            for cumulative, own, name in importtime_top(python, first, s, 12):
                print(f"    {cumulative / 1e3:7.2f} ms cumulative {own / 1e3:7.2f} ms own  {name}")


if __name__ == "__main__":
    main()
