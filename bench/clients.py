"""What bench/clients-run.sh runs inside the real clients' processes on the GPU machine.

One subcommand per check; each prints one JSON object as its last line of output. Every check
also says which libcufile files its process mapped (/proc/self/maps): a check passes only where
gpufile's library (--lib, preloaded by the caller) is mapped, and it names any other libcufile
that is mapped too.

  kvikio-check     one write and one raw cuFile read through KvikIO, compat mode off
  kvikio-read      KvikIO CuFile.read speed of a file: the first call in this process, then
                   the best of three, with CPU seconds per GiB
  torch            torch.cuda.gds GdsFile save_storage / load_storage, registered and
                   unregistered buffers, against torch.save / torch.load of the same tensor
                   and a pinned read + copy (--control: one small save and load, to see what
                   torch does without gpufile)
  fastsafetensors  SafeTensorsFileLoader with the GDS copier and with nogds=True, tensors
                   compared with safetensors' own loader

and, without a GPU, what the script reads back from the clients' own output:

  pytest-report    pytest's counts, failures and grouped skip reasons from its log (--log, --rc)
  fio-report       a fio JSON result (--file, --rc): "ok" or what went wrong, and bandwidths
"""

import argparse
import collections
import json
import os
import re
import resource
import sys
import time

GIB = 1 << 30


def libraries(lib):
    """Which libcufile files this process mapped: gpufile's (--lib) and any other."""
    mapped = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libcufile"):
                mapped.add(fields[5].strip())
    ours = os.path.realpath(lib) if lib else None
    return {"gpufile_mapped": ours in mapped, "other_libcufile": sorted(mapped - {ours})}


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, nbytes):
    """(GiB/s, CPU-s/GiB) of one call of fn, which moves nbytes."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    fn()
    dt = time.perf_counter() - t0
    return nbytes / dt / GIB, (cpu_seconds() - c0) / (nbytes / GIB)


def warm(path):
    """Reads the file twice through the page cache, so that every path reads a warm file."""
    for _ in range(2):
        with open(path, "rb", buffering=0) as f:
            while f.read(64 << 20):
                pass


def kvikio_check(args):
    import cupy
    import kvikio
    import kvikio.cufile_driver
    import kvikio.defaults

    path = os.path.join(args.dir, "kvikio-check.bin")
    a = cupy.arange(1 << 20, dtype=cupy.uint8)
    with kvikio.CuFile(path, "w") as f:
        f.write(a)
    b = cupy.zeros_like(a)
    with kvikio.CuFile(path, "r") as f:
        got = f.raw_read(b)  # cuFileRead itself: KvikIO refuses raw IO in its compat mode
    os.unlink(path)
    return {"compat_preferred": kvikio.defaults.is_compat_mode_preferred(),
            "libcufile_version": list(kvikio.cufile_driver.libcufile_version()),
            "data_ok": got == a.nbytes and bool((a == b).all()), **libraries(args.lib)}


def kvikio_read(args):
    import cupy
    import kvikio
    import kvikio.defaults

    n = os.path.getsize(args.file)
    buf = cupy.empty(n, dtype=cupy.uint8)

    def read():
        with kvikio.CuFile(args.file, "r") as f:
            got = f.read(buf)
        assert got == n, got

    first = timed(read, n)
    steady = max((timed(read, n) for _ in range(3)), key=lambda r: r[0])
    return {"first": first, "steady": steady, "threads": kvikio.defaults.get("num_threads"),
            "compat_preferred": kvikio.defaults.is_compat_mode_preferred(), **libraries(args.lib)}


def torch_gds(args):
    import torch
    import torch.cuda.gds as gds
    from torch.cuda.gds import GdsFile, gds_deregister_buffer, gds_register_buffer

    path = os.path.join(args.dir, "torch-gds.bin")
    n = args.mib << 20
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    out = {"torch": torch.__version__}
    if hasattr(gds, "is_available"):  # newer torch: a cuFile driver that works at run time
        out["gds_is_available"] = bool(gds.is_available())
    if args.control:
        try:
            f = GdsFile(path, os.O_CREAT | os.O_RDWR)
            f.save_storage(src.untyped_storage(), offset=0)
            dst = torch.zeros_like(src)
            f.load_storage(dst.untyped_storage(), offset=0)
            torch.cuda.synchronize()
            out["result"] = "works" if torch.equal(src, dst) else "contents differ"
        except Exception as e:  # what torch says when its libcufile cannot do the IO
            out["result"] = f"{type(e).__name__}: {e}"[:200]
        return {**out, **libraries(args.lib)}

    f = GdsFile(path, os.O_CREAT | os.O_RDWR)
    f.save_storage(src.untyped_storage(), offset=0)
    warm(path)  # gpufile wrote with O_DIRECT: without this the first load reads the disk
    dst = torch.empty_like(src)

    def load():
        f.load_storage(dst.untyped_storage(), offset=0)
        torch.cuda.synchronize()

    for key in ("unregistered", "registered"):
        if key == "registered":  # once, as a program registers its buffer once
            gds_register_buffer(dst.untyped_storage())
        dst.zero_()
        torch.cuda.synchronize()
        speeds = [timed(load, n)[0]]
        out[key + "_equal"] = bool(torch.equal(src, dst))
        speeds += [timed(load, n)[0] for _ in range(2)]
        out[key + "_gib_s"] = max(speeds)
    gds_deregister_buffer(dst.untyped_storage())

    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)

    def plain():
        with open(path, "rb", buffering=0) as g:
            g.readinto(host.numpy())
        dst.copy_(host)
        torch.cuda.synchronize()

    out["plain_gib_s"] = max(timed(plain, n)[0] for _ in range(3))
    out["plain_equal"] = bool(torch.equal(src, dst))

    saved = os.path.join(args.dir, "torch-save.pt")
    torch.save(src, saved)
    warm(saved)
    loaded = []

    def torch_load():
        loaded[:] = [torch.load(saved, map_location="cuda:0")]
        torch.cuda.synchronize()

    out["torch_load_gib_s"] = max(timed(torch_load, n)[0] for _ in range(3))
    out["torch_load_equal"] = bool(torch.equal(src, loaded[0]))
    del f
    os.unlink(path)
    os.unlink(saved)
    return {**out, **libraries(args.lib)}


def fastsafetensors_load(args):
    from importlib.metadata import version

    import torch
    from fastsafetensors import SafeTensorsFileLoader
    from safetensors.torch import load_file, save_file

    path = os.path.join(args.dir, f"model-{args.mib}M.safetensors")
    if not os.path.exists(path):
        g = torch.Generator().manual_seed(0)
        count = max(1, (args.mib << 20) // (64 << 20))  # 64 MiB bf16 tensors
        save_file({f"layer{i}.w": torch.randn(4096, 8192, generator=g).to(torch.bfloat16)
                   for i in range(count)}, path)
    warm(path)
    size = os.path.getsize(path)
    ref = load_file(path, device="cuda:0")

    def load(nogds):
        loader = SafeTensorsFileLoader(None, "cuda:0", nogds=nogds)
        copier = loader.copier_class.__name__
        t0 = time.perf_counter()
        loader.add_filenames({0: [path]})
        fb = loader.copy_files_to_device()
        got = {k: fb.get_tensor(k).clone() for k in loader.get_keys()}
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        fb.close()
        loader.close()
        equal = got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)
        return size / dt / 1e9, copier, equal

    gds = [load(False) for _ in range(3)]
    nogds = [load(True) for _ in range(3)]
    return {"version": version("fastsafetensors"), "size_gb": size / 1e9,
            "gds_copier": gds[0][1], "nogds_copier": nogds[0][1],
            "equal": all(r[2] for r in gds + nogds),
            "gds_gb_s": max(r[0] for r in gds), "nogds_gb_s": max(r[0] for r in nogds),
            **libraries(args.lib)}


def pytest_report(args):
    """Counts from pytest's last summary line; failures and skip reasons from -rfEs's short
    summary, else from -v's line per test (a run on the GPU machine printed no short summary)."""
    lines = open(args.log, errors="replace").read().splitlines()
    counts = dict.fromkeys(("passed", "failed", "skipped", "error"), 0)
    outcome = re.compile(r"(\d+) (passed|failed|skipped|errors?)\b")
    summaries = [l for l in lines if outcome.search(l)]
    for n, kind in outcome.findall(summaries[-1] if summaries else ""):
        counts["error" if kind.startswith("error") else kind] = int(n)
    failed = [l for l in lines if l.startswith(("FAILED ", "ERROR "))]
    if not failed:  # -v: "file::test[id] FAILED  [ 50%]"
        failed = [l.split()[0] for l in lines if re.search(r"::\S+ (FAILED|ERROR)\b", l)]
    skips = collections.Counter()
    for l in lines:
        m = re.match(r"SKIPPED \[(\d+)\] [^:]+:\d+: (.*)", l)
        if m:
            skips[m.group(2)] += int(m.group(1))
    if not skips:  # -v: "file::test[id] SKIPPED (reason)  [ 78%]"
        for l in lines:
            m = re.search(r"::\S+ SKIPPED \((.*)\)", l)
            if m:
                skips[m.group(1)] += 1
    result = "{passed} passed, {failed} failed, {skipped} skipped".format(**counts)
    if counts["error"]:
        result += f", {counts['error']} error(s)"
    if args.rc not in (0, 1):
        result += f" (pytest exit {args.rc}{': timed out' if args.rc in (124, 137) else ''})"
    notes = []
    if not summaries:
        last = next((l for l in reversed(lines) if l.strip()), "(nothing)")
        notes.append(f"pytest printed no summary; its last line: {last[:200]}")
    if failed:
        more = f" (+{len(failed) - 6} more)" if len(failed) > 6 else ""
        notes.append("failures: " + "; ".join(f[:160] for f in failed[:6]) + more)
    if skips:
        notes.append("skipped by the tests themselves: "
                     + "; ".join(f"{n} {reason}" for reason, n in skips.items()))
    return {"result": result, "notes": ". ".join(notes)}


def fio_report(args):
    """A fio --output-format=json result of one group (group_reporting)."""
    try:
        text = open(args.file, errors="replace").read()
        job = json.loads(text[text.index("{"):])["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return {"verdict": f"no JSON result (fio exit {args.rc})", "read_gib_s": None,
                "write_gib_s": None}
    wrote, read = job["write"]["io_bytes"], job["read"]["io_bytes"]
    if args.rc != 0 or job["error"]:
        verdict = f"error {job['error']}" + (f" (fio exit {args.rc})" if args.rc else "")
    elif args.verify and (wrote == 0 or read != wrote):
        verdict = f"verified {read} of {wrote} bytes"
    else:
        verdict = "ok"
    return {"verdict": verdict, "read_gib_s": job["read"]["bw_bytes"] / GIB,
            "write_gib_s": job["write"]["bw_bytes"] / GIB}


CHECKS = {"kvikio-check": kvikio_check, "kvikio-read": kvikio_read, "torch": torch_gds,
          "fastsafetensors": fastsafetensors_load, "pytest-report": pytest_report,
          "fio-report": fio_report}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("check", choices=sorted(CHECKS))
    ap.add_argument("--lib", default="", help="gpufile's libcufile.so.0 (preloaded by the caller)")
    ap.add_argument("--dir", default="/tmp", help="where the checks write their files")
    ap.add_argument("--file", help="kvikio-read: the file to read; fio-report: fio's JSON")
    ap.add_argument("--mib", type=int, default=1024, help="torch, fastsafetensors: data size")
    ap.add_argument("--control", action="store_true", help="torch: one small save and load")
    ap.add_argument("--log", help="pytest-report: pytest's output")
    ap.add_argument("--rc", type=int, default=0, help="pytest-report, fio-report: exit status")
    ap.add_argument("--verify", action="store_true",
                    help="fio-report: a verify job (every byte written must be read back)")
    args = ap.parse_args()
    print(json.dumps(CHECKS[args.check](args)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
