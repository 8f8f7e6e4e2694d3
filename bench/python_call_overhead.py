#!/usr/bin/env python3
"""Per-call cost of gpufile's synchronous Python IO (File.read / File.write), by buffer kind.

Small IO (4 KiB by default) from a file in the page cache, so that what the binding does per
call (resolving the buffer, checking arguments, releasing the GIL) is a large part of the time.
`os.preadv` into the same NumPy array is printed as the floor a Python loop of syscalls reaches.

    GPUFILE_CUDA_LIBRARY=.../libcuda.so.1 python bench/python_call_overhead.py [-n CALLS] [-s SIZE]

Without a GPU, device memory comes from the CUDA driver test double: only ratios between rows
(and between builds) mean anything there, not the absolute microseconds.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import gpufile


class CaiOnly:
    """Offers memory through __cuda_array_interface__ alone, as CuPy or Numba do (a fresh dict
    per access, like theirs)."""

    def __init__(self, owner: gpufile.DeviceBuffer, stream):
        self._owner, self._stream = owner, stream  # keeps the memory alive

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self._owner.nbytes,), "typestr": "|u1", "data": (self._owner.ptr, False),
                "strides": None, "version": 3, "stream": self._stream}


class DLPackOnly:
    """Offers memory through DLPack alone (like a CPU torch tensor)."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kw):
        return self.inner.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def off_page(make):
    """make() again until the memory does not start on a page boundary. Page-aligned 4 KiB host
    writes take tens of microseconds more (another path in the runtime), so a row would depend
    on where malloc happened to put its buffer."""
    spare = []  # held until the end, so malloc hands out other addresses
    while True:
        buf = make()
        if np.frombuffer(buf, dtype=np.uint8).ctypes.data % 4096:
            return buf
        spare.append(buf)


def buffers(size: int):
    """(name, buffer) for each buffer kind measured; device kinds only with a CUDA driver."""
    out = [("numpy", off_page(lambda: np.zeros(size, dtype=np.uint8))),
           ("bytearray", off_page(lambda: bytearray(size))),
           ("dlpack host (numpy)", DLPackOnly(off_page(lambda: np.zeros(size, dtype=np.uint8))))]
    if gpufile.cuda_available():
        dev = gpufile.DeviceBuffer(size)
        out += [("DeviceBuffer (CAI)", dev),
                ("CAI object, stream None", CaiOnly(dev, None)),
                ("CAI object, stream 1", CaiOnly(dev, 1)),
                ("CAI object, stream 2", CaiOnly(dev, 2)),
                ("DeviceArray (CAI)", gpufile.DeviceArray(dev, 0, (size // 4,), "F32")),
                ("DeviceArray via DLPack", DLPackOnly(gpufile.DeviceArray(dev, 0, (size // 4,), "F32")))]
    return out


def time_calls(call, offsets, repeats: int) -> float:
    """Best of `repeats` loops over `offsets`: microseconds per call."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for off in offsets:
            call(off)
        best = min(best, time.perf_counter() - t0)
    return best / len(offsets) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--calls", type=int, default=20000, help="calls per timed loop")
    ap.add_argument("-s", "--size", type=int, default=4096, help="bytes per call")
    ap.add_argument("-r", "--repeats", type=int, default=5, help="timed loops (the best counts)")
    ap.add_argument("--file-mib", type=int, default=64, help="size of the file read from")
    ap.add_argument("--only", default="", help="run only kinds whose name contains this")
    args = ap.parse_args()

    rng = np.random.default_rng(1)
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR"), delete=False) as tmp:
        tmp.write(rng.integers(0, 256, args.file_mib << 20, dtype=np.uint8).tobytes())
        path = tmp.name
    scratch = path + ".w"
    try:
        slots = (args.file_mib << 20) // args.size
        offsets = [int(o) * args.size for o in rng.integers(0, slots, args.calls)]
        kinds = [(n, b) for n, b in buffers(args.size) if args.only in n]
        print(f"{'kind':<28}{'read':>9}{'read 0 B':>10}{'write':>9}   "
              f"(us per call; {args.size} B, {args.calls} calls, best of {args.repeats})")
        fd = os.open(path, os.O_RDONLY)
        host = np.zeros(args.size, dtype=np.uint8)
        floor = time_calls(lambda off: os.preadv(fd, [host], off), offsets, args.repeats)
        os.close(fd)
        print(f"{'os.preadv floor (numpy)':<28}{floor:>9.2f}")
        rows = {n: [] for n, _ in kinds}
        # All reads first, then the writes into another file: writes dirty the page cache, which
        # would change the reads' path, not the binding's cost.
        with gpufile.open(path) as f:
            for name, buf in kinds:
                f.read(buf, args.size)  # warm up (the first IO opens the driver)
                rows[name].append(time_calls(lambda off: f.read(buf, args.size, off), offsets, args.repeats))
                # Zero bytes: resolving the buffer, the checks and the GIL, nearly no IO.
                rows[name].append(time_calls(lambda off: f.read(buf, 0, off), offsets, args.repeats))
        with gpufile.open(scratch, "w") as f:
            for name, buf in kinds:
                f.write(buf, args.size, (args.file_mib << 20) - args.size)
                rows[name].append(time_calls(lambda off: f.write(buf, args.size, off), offsets, args.repeats))
        for name, (r, r0, w) in rows.items():
            print(f"{name:<28}{r:>9.2f}{r0:>10.2f}{w:>9.2f}")
    finally:
        os.unlink(path)
        if os.path.exists(scratch):
            os.unlink(scratch)


if __name__ == "__main__":
    main()
