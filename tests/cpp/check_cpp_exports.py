#!/usr/bin/env python3
"""Check what libgpufile.so exports: every cuFile 1.15 C function, every name of the public C++
API (public_api.txt), and nothing else (no symbol of gpufile's internals, no stray C symbol).

usage: check_cpp_exports.py --library LIB --cufile-symbols LIST --public LIST [--nm nm]
"""
import argparse
import re
import subprocess
import sys

VAGUE_PREFIXES = ("typeinfo name for ", "typeinfo for ", "vtable for ")


def read_list(path):
    with open(path, encoding="utf-8") as f:
        return [line.split("#", 1)[0].strip() for line in f if line.split("#", 1)[0].strip()]


def exported(nm, lib):
    """(raw name, demangled name) of every defined dynamic symbol."""
    def names(extra):
        res = subprocess.run([nm, "-D", "--defined-only", *extra, lib], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, check=False)
        if res.returncode != 0:
            sys.exit(f"error: nm failed: {res.stderr}")
        return [line.split(None, 2)[2] for line in res.stdout.splitlines()
                if len(line.split(None, 2)) == 3]
    return list(zip(names([]), names(["-C"])))


def owner(demangled, public):
    """The public name a demangled C++ symbol belongs to, or None."""
    for prefix in VAGUE_PREFIXES:
        if demangled.startswith(prefix):
            demangled = demangled[len(prefix):]
    for name in public:
        if re.match(re.escape(name) + r"($|::|\(|\[abi)", demangled):
            return name
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", required=True)
    ap.add_argument("--cufile-symbols", required=True)
    ap.add_argument("--public", required=True)
    ap.add_argument("--nm", default="nm")
    args = ap.parse_args()

    cufile = set(read_list(args.cufile_symbols))
    public = read_list(args.public)
    seen_cufile, seen_public, stray = set(), set(), []
    for raw, demangled in exported(args.nm, args.library):
        raw = raw.split("@", 1)[0]
        if raw in cufile:
            seen_cufile.add(raw)
            continue
        name = owner(demangled, public)
        if name is None:
            stray.append(demangled)
        else:
            seen_public.add(name)

    problems = []
    problems += [f"cuFile function not exported: {n}" for n in sorted(cufile - seen_cufile)]
    problems += [f"public C++ name not exported: {n}" for n in public if n not in seen_public]
    problems += [f"exported but not public: {n}" for n in sorted(stray)]
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"ok: {len(seen_cufile)} cuFile functions and {len(seen_public)} public C++ names "
          "exported, nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(main())
