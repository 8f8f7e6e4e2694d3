#!/usr/bin/env python3
"""Check what a built libcufile.so.0 exports against the cuFile 1.15 public symbol list.

Passes when
  * the set of defined dynamic function symbols equals the expected list exactly (nothing
    missing, nothing extra),
  * no other kind of symbol (data, TLS, ...) is exported,
  * the SONAME is the expected one, and
  * the library defines no symbol versions: NVIDIA's libcufile.so.0 has none, so programs
    linked against either library must find plain, unversioned names in the other.

usage: check_exported_symbols.py --library LIB --expected LIST [--soname NAME]
                                 [--nm nm] [--readelf readelf]
"""
import argparse
import re
import subprocess
import sys


def run(cmd):
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({res.returncode}):\n{res.stderr}")
    return res.stdout


def read_expected(path):
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def exported(nm, lib):
    """(functions, others): names of the defined dynamic symbols, split by kind."""
    functions, others = set(), {}
    for line in run([nm, "-D", "--defined-only", lib]).splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, name = parts[1], parts[2]
        name = name.split("@", 1)[0]  # strip a version suffix if one is ever present
        if kind in ("T", "t", "W", "i"):  # text, weak text, indirect function
            functions.add(name)
        else:
            others[name] = kind
    return functions, others


def soname(readelf, lib):
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", run([readelf, "-d", "-W", lib]))
    return m.group(1) if m else None


def version_definitions(readelf, lib):
    out = run([readelf, "-V", "-W", lib])
    return "Version definition section" in out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", required=True)
    ap.add_argument("--expected", required=True)
    ap.add_argument("--soname", default="libcufile.so.0")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--readelf", default="readelf")
    args = ap.parse_args()

    expected = read_expected(args.expected)
    functions, others = exported(args.nm, args.library)
    problems = []

    missing = sorted(expected - functions)
    extra = sorted(functions - expected)
    if missing:
        problems.append(f"{len(missing)} expected function(s) not exported:\n  " + "\n  ".join(missing))
    if extra:
        problems.append(f"{len(extra)} unexpected function(s) exported:\n  " + "\n  ".join(extra))
    if others:
        problems.append("exported non-function symbols:\n  " +
                        "\n  ".join(f"{n} ({k})" for n, k in sorted(others.items())))

    got = soname(args.readelf, args.library)
    if got != args.soname:
        problems.append(f"SONAME is {got!r}, expected {args.soname!r}")

    if version_definitions(args.readelf, args.library):
        problems.append("the library defines symbol versions; NVIDIA's libcufile.so.0 defines "
                        "none (use an anonymous version script)")

    if problems:
        print(f"{args.library}: ABI check FAILED", file=sys.stderr)
        for p in problems:
            print("- " + p, file=sys.stderr)
        return 1
    print(f"{args.library}: exports exactly the {len(expected)} expected functions, "
          f"SONAME {got}, unversioned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
