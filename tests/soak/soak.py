#!/usr/bin/env python3
"""The Python half of the GPU soak (issue 15; docs/reliability.md, "GPU soak").

Runs next to gpufile_soak for the same time: threads, each with a file of its own, run a seeded
random mix of gpufile.File.read / write (synchronous), pread / pwrite (futures, several in flight),
read_async / write_async (CUDA-stream IO, where there is a GPU), and small files opened and closed.
Memory: CuPy arrays when CuPy and a GPU are present, else gpufile.DeviceBuffer on a GPU (or the
CUDA driver test double), else NumPy host arrays. Every read is compared byte for byte with a
shadow of the file, every write must report all its bytes, and each file is compared whole at
the end. Every --pause-every seconds the threads close their files at a barrier and the driver is
closed (gpufile.driver_close) and sampled quiet. RSS, descriptors, threads (io_uring's kernel
workers apart) and gpufile's pinned staging bytes are sampled each second.

Verdict, exit 0 only if all hold: no error and no wrong byte; RSS flat (the last 10% of the
samples at most the warm-up's (first 20%) maximum plus max(--rss-tolerance-mib, 10%)); at the
pauses (driver closed) the same descriptors and threads first and last, pinned staging 0; at the
end, with the driver closed, descriptors and threads back to their counts before the first IO.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

import gpufile

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

KiB, MiB = 1024, 1024 * 1024


# ---- the process -------------------------------------------------------------------------------

def proc_status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmPin", "VmLck", "Threads"):
                out[k] = int(v.split()[0])
    return out


def count_fds():
    return len(os.listdir("/proc/self/fd")) - 1  # listdir's own descriptor


def thread_names():
    names = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n = f.read().strip()
        except OSError:
            continue
        names[n] = names.get(n, 0) + 1
    return names


def count_threads():
    """The process's threads and io_uring's kernel workers (iou-wrk-*, which come and go)."""
    names = thread_names()
    iou = sum(k for n, k in names.items() if n.startswith("iou-"))
    return sum(names.values()) - iou, iou


def pinned_staging():
    return int(gpufile.stats().get("pinned_staging_bytes", -1))


# ---- memory ----------------------------------------------------------------------------------------

class Memory:
    """One buffer of `nbytes` in the chosen kind, with host-side copies in and out."""

    def __init__(self, kind, nbytes):
        self.kind = kind
        self.nbytes = nbytes
        if kind == "cupy":
            import cupy
            self.buf = cupy.zeros(nbytes, dtype=cupy.uint8)
        elif kind == "device":
            self.buf = gpufile.DeviceBuffer(nbytes)
        else:
            self.buf = np.zeros(nbytes, dtype=np.uint8) if np is not None else bytearray(nbytes)

    def upload(self, off, data):
        n = len(data)
        if self.kind == "cupy":
            import cupy
            self.buf[off:off + n] = cupy.asarray(np.frombuffer(data, dtype=np.uint8))
        elif self.kind == "device":
            self.buf.copy_from_host(data, off)
        else:
            memoryview(self.buf)[off:off + n] = data

    def download(self, off, n):
        if self.kind == "cupy":
            return self.buf[off:off + n].get().tobytes()
        if self.kind == "device":
            host = bytearray(n)
            if n:
                self.buf.copy_to_host(host, off)
            return bytes(host)
        return bytes(memoryview(self.buf)[off:off + n])


_cuda = None


def bind_primary_context():
    """Makes device 0's primary context current on this thread (CUDA driver API via ctypes)."""
    global _cuda
    import ctypes
    if _cuda is None:
        _cuda = ctypes.CDLL(os.environ.get("GPUFILE_CUDA_LIBRARY") or "libcuda.so.1")
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    _cuda.cuDeviceGet(ctypes.byref(dev), 0)
    _cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)  # kept for the process's life
    _cuda.cuCtxSetCurrent(ctx)


def choose_memory(want):
    if want in ("auto", "cupy"):
        try:
            import cupy
            if gpufile.cuda_available() and cupy.cuda.runtime.getDeviceCount() > 0:
                return "cupy"
        except Exception:  # noqa: BLE001 (no CuPy, or no GPU for it)
            if want == "cupy":
                raise
    if want in ("auto", "device") and gpufile.cuda_available():
        return "device"
    return "host"


# ---- the soak ----------------------------------------------------------------------------------------

class Soak:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.errors = []
        self.lock = threading.Lock()
        self.counts = {k: 0 for k in ("read", "write", "pread", "pwrite", "read_async", "write_async",
                                      "small_files", "pauses")}
        self.bytes = 0
        self.samples = []
        self.stop = threading.Event()
        self.pausing = threading.Event()
        self.barrier = threading.Barrier(args.threads + 1)
        self.csv = open(args.csv, "w") if args.csv else None
        if self.csv:
            self.csv.write("t_s,phase,rss_kib,fds,threads,io_uring_threads,vm_pin_kib,vm_lck_kib,"
                           "pinned_staging_bytes,ops,bytes\n")

    def now(self):
        return time.monotonic() - self.t0

    def error(self, msg):
        with self.lock:
            self.errors.append(msg)
        print(f"soak.py: ERROR at {self.now():.1f} s: {msg}", file=sys.stderr, flush=True)

    def count(self, kind, nbytes=0):
        with self.lock:
            self.counts[kind] += 1
            self.bytes += nbytes

    def sample(self, phase):
        st = proc_status()
        threads, iou = count_threads()
        s = dict(t=self.now(), phase=phase, rss=st.get("VmRSS", 0), fds=count_fds(), threads=threads, iou=iou,
                 pin=st.get("VmPin", 0), lck=st.get("VmLck", 0), pinned=pinned_staging(),
                 ops=sum(self.counts.values()), bytes=self.bytes)
        with self.lock:
            self.samples.append(s)
            if self.csv:
                self.csv.write("{t:.3f},{phase},{rss},{fds},{threads},{iou},{pin},{lck},{pinned},{ops},{bytes}\n"
                               .format(**s))
                self.csv.flush()
        return s


class Worker:
    def __init__(self, soak, tid, kind):
        self.s = soak
        self.tid = tid
        a = soak.args
        self.rng = random.Random(a.seed * 1000003 + tid)
        self.kind = kind
        self.path = os.path.join(a.dir, f"gpufile-soak-py-{os.getpid()}-t{tid}.bin")
        self.size = a.file_mib * MiB
        self.shadow = bytearray(self.rng.randbytes(self.size))
        with open(self.path, "wb") as f:
            f.write(self.shadow)
        self.bufsize = a.max_io + 64 * KiB
        self.mem = Memory(kind, self.bufsize)
        self.failed = False
        self.f = None

    def fail(self, msg):
        self.failed = True
        self.s.error(f"thread {self.tid} ({self.kind}): {msg}")

    def log_size(self, cap):
        cap = max(1, min(cap, self.s.args.max_io))
        band = 1 << self.rng.randrange(cap.bit_length() + 1)
        return 1 + self.rng.randrange(min(band, cap))

    def pick(self, cap):
        n = self.log_size(cap)
        off = self.rng.randrange(self.size - n + 1)
        return off, n

    def boff(self, n, room):
        hi = room - n
        r = self.rng.randrange(4)
        return 0 if r == 0 else min(hi, self.rng.randrange(hi // 4096 + 1) * 4096) if r == 1 else self.rng.randrange(hi + 1)

    def check(self, what, off, n, boff):
        got = self.mem.download(boff, n)
        want = bytes(self.shadow[off:off + n])
        if got != want:
            i = next(k for k in range(n) if got[k] != want[k])
            self.fail(f"{what} off={off} size={n} buf_off={boff}: first wrong byte {i}: got {got[i]:#x} want {want[i]:#x}")
            return False
        return True

    def run(self):
        if self.kind == "device":
            bind_primary_context()  # as CuPy or PyTorch would: the NULL stream needs a context
        try:
            self.f = gpufile.open(self.path, "r+")
            while not self.s.stop.is_set():
                if self.s.pausing.is_set():
                    self.pause()
                    continue
                if self.failed:
                    time.sleep(0.01)
                    continue
                r = self.rng.randrange(100)
                try:
                    if r < 30:
                        self.sync_read()
                    elif r < 50:
                        self.sync_write()
                    elif r < 75:
                        self.futures()
                    elif r < 90:
                        self.stream_io()
                    else:
                        self.small_file()
                except Exception as e:  # noqa: BLE001 (any failure is the soak's finding)
                    self.fail(f"{type(e).__name__}: {e}")
        finally:
            if self.f is not None:
                self.f.close()
            for k in range(2):
                try:
                    os.unlink(f"{self.path}.small{k}")
                except OSError:
                    pass

    def pause(self):
        self.f.close()
        self.f = None
        self.s.barrier.wait()  # arrived: the main thread closes the driver
        self.s.barrier.wait()  # released
        self.f = gpufile.open(self.path, "r+")

    def sync_read(self):
        off, n = self.pick(self.bufsize)
        b = self.boff(n, self.bufsize)
        got = self.f.read(self.mem.buf, size=n, file_offset=off, buf_offset=b)
        if got != n:
            return self.fail(f"read off={off} size={n} returned {got}")
        if self.check("read", off, n, b):
            self.s.count("read", n)

    def sync_write(self):
        off, n = self.pick(self.bufsize)
        b = self.boff(n, self.bufsize)
        data = self.rng.randbytes(n)
        self.mem.upload(b, data)
        got = self.f.write(self.mem.buf, size=n, file_offset=off, buf_offset=b)
        if got != n:
            return self.fail(f"write off={off} size={n} returned {got}")
        self.shadow[off:off + n] = data
        self.s.count("write", n)

    def plan_disjoint(self, k, slot):
        """k ranges of the file, none overlapping, each fitting a slot of the buffer."""
        out = []
        for _ in range(k):
            off, n = self.pick(slot - 64)
            if all(off + n <= o or o + m <= off for o, m, _ in out):
                out.append((off, n, self.rng.randrange(2) == 1))
        return out

    def futures(self):
        """2 to 6 preads/pwrites in flight at once, into disjoint slots; then their results."""
        slot = self.bufsize // 8
        plan = self.plan_disjoint(2 + self.rng.randrange(5), slot)
        futs = []
        for i, (off, n, write) in enumerate(plan):
            b = i * slot + self.rng.randrange(64)
            if write:
                data = self.rng.randbytes(n)
                self.mem.upload(b, data)
                futs.append((self.f.pwrite(self.mem.buf, size=n, file_offset=off, buf_offset=b), off, n, b, data))
            else:
                futs.append((self.f.pread(self.mem.buf, size=n, file_offset=off, buf_offset=b), off, n, b, None))
        for fut, off, n, b, data in futs:
            got = fut.result(timeout=60)
            if got != n:
                return self.fail(f"{'pwrite' if data else 'pread'} off={off} size={n} returned {got}")
            if data is not None:
                self.shadow[off:off + n] = data
                self.s.count("pwrite", n)
        for fut, off, n, b, data in futs:
            if data is None:
                if not self.check("pread", off, n, b):
                    return
                self.s.count("pread", n)

    def stream_io(self):
        """One write and one read of the same range on a CUDA stream (stream order), where there is a GPU."""
        if self.kind == "host":
            return self.futures()
        if self.kind == "cupy":
            import cupy
            stream = cupy.cuda.Stream(non_blocking=True)
        else:
            stream = 0  # the legacy default stream
        half = self.bufsize // 2
        off, n = self.pick(half - 64)
        bw = self.rng.randrange(64)
        br = half + self.rng.randrange(64)
        data = self.rng.randbytes(n)
        self.mem.upload(bw, data)
        wf = self.f.write_async(self.mem.buf, stream, size=n, file_offset=off, buf_offset=bw)
        rf = self.f.read_async(self.mem.buf, stream, size=n, file_offset=off, buf_offset=br)
        w, r = wf.result(), rf.result()
        if w != n or r != n:
            return self.fail(f"write_async/read_async off={off} size={n} returned {w}/{r}")
        self.shadow[off:off + n] = data
        self.s.count("write_async", n)
        if self.check("read_async", off, n, br):
            self.s.count("read_async", n)

    def small_file(self):
        """A small file of its own: created, written, read back across its end, closed."""
        p = f"{self.path}.small{self.rng.randrange(2)}"
        n = 1 + self.rng.randrange(256 * KiB)
        data = self.rng.randbytes(n)
        self.mem.upload(0, data)
        with gpufile.open(p, "w+") as f:
            if f.write(self.mem.buf, size=n) != n:
                return self.fail(f"small file write of {n}")
            off = self.rng.randrange(n)
            b = 256 * KiB + 8192
            got = f.read(self.mem.buf, size=n - off + 1 + self.rng.randrange(4096), file_offset=off, buf_offset=b)
            if got != n - off:
                return self.fail(f"small file read at {off} of a {n}-byte file returned {got}, expected {n - off}")
            if self.mem.download(b, n - off) != data[off:]:
                return self.fail(f"small file read at {off} of a {n}-byte file: wrong bytes")
        if self.rng.randrange(3) == 0:
            os.unlink(p)
        self.s.count("small_files", n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", default=os.environ.get("TMPDIR") or "/tmp")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--memory", choices=["auto", "cupy", "device", "host"], default="auto")
    ap.add_argument("--max-io", type=int, default=8 * MiB)
    ap.add_argument("--file-mib", type=int, default=32)
    ap.add_argument("--pause-every", type=float, default=None, help="default min(30, seconds / 5)")
    ap.add_argument("--rss-tolerance-mib", type=float, default=32)
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    if args.pause_every is None:
        args.pause_every = min(30.0, max(1.0, args.seconds / 5))
    args.max_io = min(args.max_io, args.file_mib * MiB)
    cmd = (f"{sys.executable} {sys.argv[0]} --seconds {args.seconds:g} --threads {args.threads} --seed {args.seed} "
           f"--dir {args.dir} --memory {args.memory} --max-io {args.max_io} --file-mib {args.file_mib} "
           f"--pause-every {args.pause_every:g}")

    kind = choose_memory(args.memory)
    # Warm what is not gpufile's: the memory kind's own machinery (CuPy's pool, the CUDA context),
    # and a stream that ran a host function: the CUDA driver starts the thread that runs host
    # functions at the first one and keeps it (read_async/write_async queue host functions; on
    # the H100 machine the final count was that one thread above the start's without this).
    Memory(kind, 4096).download(0, 16)
    if kind == "cupy":
        import cupy
        warm = cupy.cuda.Stream(non_blocking=True)
        warm.launch_host_func(lambda _arg: None, None)
        warm.synchronize()
        del warm
    soak = Soak(args)
    base_fds = count_fds()
    base_threads, _ = count_threads()
    base_names = thread_names()
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    say(f"soak.py: {args.seconds:g} s, {args.threads} threads, seed {args.seed}, memory {kind} "
        f"(CUDA: {'yes' if gpufile.cuda_available() else gpufile.cuda_unavailable_reason()}), dir {args.dir}")
    say(f"  before the first IO: {base_fds} descriptors, {base_threads} threads")

    workers = [Worker(soak, t, kind) for t in range(args.threads)]
    soak.sample("start")
    stop_monitor = threading.Event()

    def monitor():
        nxt = time.monotonic() + 1
        while not stop_monitor.wait(max(0.0, nxt - time.monotonic())):
            nxt += 1
            s = soak.sample("pause" if soak.pausing.is_set() else "run")
            if not args.quiet and int(s["t"]) % 10 == 0:
                print(f"  {s['t']:6.0f} s  rss {s['rss'] // 1024} MiB  fds {s['fds']}  threads {s['threads']}  "
                      f"pinned staging {s['pinned'] / MiB:.1f} MiB  ops {s['ops']}  {s['bytes'] / 2**30:.2f} GiB  "
                      f"errors {len(soak.errors)}", flush=True)

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    deadline = soak.t0 + args.seconds
    next_pause = soak.t0 + args.pause_every
    quiet = []
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        time.sleep(max(0.0, min(deadline, next_pause) - now))
        if time.monotonic() >= deadline:
            break
        soak.pausing.set()
        try:
            soak.barrier.wait(timeout=120)  # every worker closed its file: no IO in flight
        except threading.BrokenBarrierError:
            soak.error("the workers did not reach the pause within 120 s: a hang")
            os._exit(3)
        gpufile.driver_close()
        time.sleep(0.3)  # threads of destroyed CUDA streams end a moment after
        quiet.append(soak.sample("quiet-closed"))
        quiet[-1]["names"] = thread_names()
        if quiet[-1]["pinned"] > 0:
            soak.error(f"{quiet[-1]['pinned']} bytes of pinned staging held with the driver closed")
        soak.counts["pauses"] += 1
        soak.pausing.clear()
        soak.barrier.wait()
        next_pause += args.pause_every
    soak.stop.set()
    for t in threads:
        t.join()
    run_s = soak.now()
    stop_monitor.set()
    mon.join()

    for w in workers:
        with open(w.path, "rb") as f:
            got = f.read()
        if got != w.shadow and not w.failed:
            soak.error(f"thread {w.tid}: its file differs from the shadow at the end")
        os.unlink(w.path)
        w.mem = None
    workers = None
    if kind == "cupy":
        # CuPy keeps the pinned buffers it stages host arrays through in a pool of its own: give
        # them back, so that the final VmPin shows what is left of gpufile's (and the driver's).
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    gpufile.driver_close()
    fin = None
    settle = time.monotonic() + 5
    while True:
        fin = soak.sample("final-closed")
        if (fin["fds"] == base_fds and fin["threads"] == base_threads) \
                or time.monotonic() > settle:
            break
        time.sleep(0.2)
    fin["names"] = thread_names()

    failures = []
    if soak.errors:
        failures.append(f"{len(soak.errors)} errors (wrong bytes or failed calls)")
    run = [s for s in soak.samples if s["phase"] == "run"]
    rss_note = "RSS: too few samples to judge"
    if len(run) >= 10:
        warm = max((s["rss"] for s in run if s["t"] <= 0.2 * args.seconds), default=0)
        tail = max((s["rss"] for s in run if s["t"] >= 0.9 * run_s), default=0)
        tol = max(int(args.rss_tolerance_mib * 1024), warm // 10)
        rss_note = f"RSS: warm-up max {warm // 1024} MiB, last 10% max {tail // 1024} MiB, limit {(warm + tol) // 1024} MiB"
        if not (warm > 0 and tail <= warm + tol):
            failures.append("RSS grew: " + rss_note)
    if len(quiet) >= 2:
        a, b = quiet[0], quiet[-1]
        if a["fds"] != b["fds"]:
            failures.append(f"descriptors at the pauses (driver closed): first {a['fds']}, last {b['fds']}")
        if a["threads"] != b["threads"]:
            failures.append(f"threads at the pauses (driver closed): first {a['threads']} ({a['names']}), "
                            f"last {b['threads']} ({b['names']})")
    want_fds = base_fds  # the CSV was open then too
    if fin["fds"] != want_fds:
        failures.append(f"descriptors after the final close: {fin['fds']}, at the start {want_fds}")
    if fin["threads"] != base_threads:
        failures.append(f"threads after the final close: {fin['threads']} ({fin['names']}), "
                        f"at the start {base_threads} ({base_names})")
    if fin["pinned"] > 0:
        failures.append(f"pinned staging after the final close: {fin['pinned']} bytes")
    if soak.csv:
        soak.csv.close()

    gib = soak.bytes / 2**30
    print(f"soak.py: {run_s:.1f} s, {args.threads} threads, seed {args.seed}, memory {kind}")
    print("  " + ", ".join(f"{k} {v}" for k, v in soak.counts.items()) + f"; {gib:.2f} GiB, {gib / max(run_s, 1e-9):.2f} GiB/s")
    for name, key, div, unit in (("RSS", "rss", 1024, "MiB"), ("descriptors", "fds", 1, ""),
                                 ("threads", "threads", 1, "(io_uring's not counted)"),
                                 ("io_uring workers", "iou", 1, ""), ("VmPin", "pin", 1024, "MiB"),
                                 ("pinned staging", "pinned", MiB, "MiB")):
        v = [s[key] / div for s in soak.samples]
        print(f"  {name:18s} first {v[0]:10.1f}  last {v[-1]:10.1f}  min {min(v):10.1f}  max {max(v):10.1f} {unit}")
    print("  " + rss_note)
    print(f"  pauses {len(quiet)}; final (driver closed): fds {fin['fds']} (start {want_fds}), threads {fin['threads']} "
          f"(start {base_threads}), pinned staging {fin['pinned']} B")
    for e in soak.errors[:50]:
        print("  error: " + e)
    if failures:
        for f in failures:
            print("  FAILED: " + f)
        print(f"soak.py: FAILED (seed {args.seed})\n  reproduce: {cmd}")
        return 1
    print("soak.py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
