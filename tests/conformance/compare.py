#!/usr/bin/env python3
"""Compares outputs of cufile_conformance (tests/conformance/README.md).

  compare.py check EXPECTED ACTUAL [--no-gpu]
      CI's check: every line of EXPECTED must appear in ACTUAL with the same result, and ACTUAL
      may have no line EXPECTED lacks. A line of EXPECTED that starts with "[gpu] " holds only
      on a real GPU: with --no-gpu it is not compared (its step must still be present).
      Exit status 1 on any difference.

  compare.py run HARNESS LIBCUFILE EXPECTED [--no-gpu] [--save FILE]
      Runs the harness against LIBCUFILE, then checks its output as above (CTest's entry).

  compare.py diff A B [--names NAME_A NAME_B] [--markdown]
      Two runs side by side (NVIDIA's library against gpufile's): the differing cells, one per
      step, and their count.
"""
import argparse
import os
import subprocess
import sys
import tempfile

GPU_MARK = "[gpu] "


def parse(path):
    """Returns {step: (result, gpu_only)} in file order."""
    cells = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            gpu_only = line.startswith(GPU_MARK)
            if gpu_only:
                line = line[len(GPU_MARK):]
            step, sep, result = line.partition(": ")
            if not sep:
                step, result = line.rstrip(":"), ""
            if step in cells:
                sys.exit(f"{path}:{number}: step {step!r} appears twice")
            cells[step] = (result, gpu_only)
    return cells


def check(expected_path, actual_path, no_gpu):
    expected, actual = parse(expected_path), parse(actual_path)
    problems = []
    for step, (want, gpu_only) in expected.items():
        if step not in actual:
            problems.append(f"missing   {step}: expected {want!r}")
        elif actual[step][0] != want and not (gpu_only and no_gpu):
            problems.append(f"differs   {step}: expected {want!r}, got {actual[step][0]!r}")
    for step, (got, _) in actual.items():
        if step not in expected:
            problems.append(f"unexpected {step}: {got!r}")
    compared = sum(1 for _, g in expected.values() if not (g and no_gpu))
    if problems:
        print("\n".join(problems))
        print(f"conformance: {len(problems)} of {len(expected)} steps differ from {expected_path}")
        return 1
    print(f"conformance: {compared} steps as expected"
          f"{f', {len(expected) - compared} GPU-only steps not compared' if no_gpu else ''}")
    return 0


def run(harness, library, expected_path, no_gpu, save):
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, CONFORMANCE_DIR=work)
        proc = subprocess.run([harness, library], stdout=subprocess.PIPE, env=env, text=True,
                              timeout=600)
    out_path = save or os.path.join(tempfile.gettempdir(), f"cufile-conformance-{os.getpid()}.txt")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(proc.stdout)
    status = check(expected_path, out_path, no_gpu)
    if not save:
        os.unlink(out_path)
    if proc.returncode != 0:
        print(f"conformance: the harness exited with {proc.returncode}")
        return 1
    return status


def diff(a_path, b_path, names, markdown):
    a, b = parse(a_path), parse(b_path)
    steps = list(a) + [s for s in b if s not in a]
    rows = []
    for step in steps:
        ra = a.get(step, ("(absent)", False))[0]
        rb = b.get(step, ("(absent)", False))[0]
        if ra != rb:
            rows.append((step, ra, rb))
    if markdown:
        print(f"| step | {names[0]} | {names[1]} |")
        print("|---|---|---|")
        for step, ra, rb in rows:
            cell = lambda s: s.replace("|", "\\|")
            print(f"| `{step}` | {cell(ra)} | {cell(rb)} |")
    else:
        for step, ra, rb in rows:
            print(f"{step}\n  {names[0]}: {ra}\n  {names[1]}: {rb}")
    print(f"\n{len(rows)} of {len(steps)} steps differ")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("expected")
    c.add_argument("actual")
    c.add_argument("--no-gpu", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("harness")
    r.add_argument("library")
    r.add_argument("expected")
    r.add_argument("--no-gpu", action="store_true")
    r.add_argument("--save")
    d = sub.add_parser("diff")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--names", nargs=2, default=["A", "B"])
    d.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.command == "check":
        return check(args.expected, args.actual, args.no_gpu)
    if args.command == "run":
        return run(args.harness, args.library, args.expected, args.no_gpu, args.save)
    return diff(args.a, args.b, args.names, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
