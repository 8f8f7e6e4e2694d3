"""What the bench/ harnesses share (side_by_side.py, callers.py): running a measuring program with
a log, a worker in a fresh process (remote_gpu.py, zarr_gpu.py), reading the lines of gpufile_compare and `gpufile bench --json`, the page cache (warm,
drop), the data file, which libcufile a process runs on, the pinned host-to-device ceiling
through CuPy (hdf5_gpu.py, remote_gpu.py), and the commit a table names (commit(); the shell
harnesses run `python3 bench/benchlib.py commit`)."""
import ctypes
import json
import os
import re
import platform
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10


def human(n):
    for unit, size in (("G", GIB), ("M", MIB), ("K", KIB)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


class Shell:
    """Runs the measuring programs, each command and its output in one log file."""

    def __init__(self, log_path):
        self.log = open(log_path, "w")

    def say(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def run(self, cmd, env=None, timeout=600):
        full_env = dict(os.environ, **(env or {}))
        shown = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
        except subprocess.TimeoutExpired:  # a hung point is a failed point, not a dead run
            p = subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s")
        self.log.write(f"$ {shown + ' ' if shown else ''}{' '.join(cmd)}\n{p.stdout}{p.stderr}\n")
        self.log.flush()
        return p

    def run_together(self, cmds, envs=None, timeout=600):
        """Starts every command at once (one process each; `envs` their added environments) and
        waits for all: their CompletedProcesses, in order. A command still running `timeout`
        seconds after the start is killed and gets exit 124, as `timeout` gives."""
        envs = envs or [{}] * len(cmds)
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **e), start_new_session=True)
                 for c, e in zip(cmds, envs)]
        deadline = time.monotonic() + timeout
        done = []
        try:
            for c, e, proc in zip(cmds, envs, procs):
                try:
                    out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
                    rc = proc.returncode
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)  # the process and whatever it started
                    out, err = proc.communicate()
                    rc, err = 124, err + f"timed out after {timeout} s"
                shown = " ".join(f"{k}={v}" for k, v in e.items())
                self.log.write(f"$ {shown + ' ' if shown else ''}{' '.join(c)} &\n{out}{err}\n")
                done.append(subprocess.CompletedProcess(c, rc, out, err))
        finally:  # stopped from outside (SIGTERM from `timeout`): leave no process behind
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
        self.log.flush()
        return done


def failure(p):
    """The error of a run that gave no result: our tools' first message (a usage text may
    follow it), else the last line (a Python traceback ends with its error)."""
    text = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()
    ours = [l for l in text if l.startswith("gpufile")]
    return {"error": (ours or text[-1:])[0][:200]}


# gpufile_compare: "<mode> <GiB> GiB <s> s <GiB/s> GiB/s cpu <c> s/GiB (note)"
COMPARE_LINE = re.compile(
    r"^(\S+)\s+([\d.]+) GiB\s+([\d.]+) s\s+([\d.]+) GiB/s cpu\s+([\d.]+) s/GiB ?(.*)$")
PERCENTILES = re.compile(r"p50 ([\d.]+) us p99 ([\d.]+) us")


def parse_compare(p):
    """{bytes, secs, cpu, note} of a gpufile_compare run (and p50_us, p99_us where it has them),
    or {error}."""
    lines = p.stdout.strip().splitlines()
    m = COMPARE_LINE.match(lines[-1]) if p.returncode == 0 and lines else None
    if not m:
        return failure(p)
    gib, secs, cpu_per = float(m.group(2)), float(m.group(3)), float(m.group(5))
    res = {"bytes": int(gib * GIB), "secs": secs, "cpu": cpu_per * gib, "note": m.group(6)}
    q = PERCENTILES.search(m.group(6))
    if q:
        res.update(p50_us=float(q.group(1)), p99_us=float(q.group(2)))
    return res


def parse_bench(p):
    """{bytes, secs, cpu, ops, p50_us, p99_us, max_us} of a `gpufile bench --json` run, or {error}."""
    try:
        doc = json.loads(p.stdout)  # one document: {"ok": ..., "results": [...]}
    except ValueError:
        return failure(p)
    measured = [r for r in doc.get("results", []) if r.get("pass") == "measure"]
    if p.returncode != 0 or not doc.get("ok") or not measured:
        return failure(p)
    j = measured[-1]  # a job file's total comes last
    done = j["dataset_done_kib"] * KIB
    return {"bytes": done, "secs": j["total_time_s"], "cpu": j["cpu_s_per_gib"] * done / GIB,
            "ops": j["ops"], "p50_us": j["p50_latency_us"], "p99_us": j["p99_latency_us"],
            "max_us": j["max_latency_us"]}


def run_worker(shell, script, spec, env=None):
    """Runs `script worker JSON` in a fresh process; its result is the line "RESULT {json}"."""
    p = shell.run([sys.executable, os.path.abspath(script), "worker", json.dumps(spec)], env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return failure(p)


def run_fresh(script, spec, extra=None, env=None):
    """Runs `script worker JSON` in a fresh process of this interpreter, with `env` added to the
    environment (remote_gpu.py, zarr_gpu.py): the dict of its "RESULT {json}" line, else `spec`
    with ok False and the end of its output as the error; `extra` is added to either."""
    p = subprocess.run([sys.executable, os.path.abspath(script), "worker", json.dumps(spec)],
                       env=dict(os.environ, **env) if env else None, capture_output=True, text=True,
                       timeout=600)
    extra = extra or {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]), **extra)
    return dict(spec, **extra, ok=False, error=(p.stdout + p.stderr).strip()[-2000:])


def installed(module):
    """Whether `module` imports in a worker's environment (checked here, where the same sys.path
    applies)."""
    import importlib.util
    return importlib.util.find_spec(module) is not None


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def warm(path, times=1):
    """Reads the file through the page cache. The second read of fresh pages costs more than
    later ones (the kernel moves them to its active list then), so callers read twice or more
    before a measurement and every measurement finds the pages in the same state."""
    for _ in range(times):
        with open(path, "rb") as f:
            while f.read(64 * MIB):
                pass


def gpu_count():
    """How many GPUs the CUDA driver shows this process (GPUFILE_CUDA_LIBRARY's double, else
    libcuda.so.1); 0 without a driver."""
    try:
        cu = ctypes.CDLL(os.environ.get("GPUFILE_CUDA_LIBRARY") or "libcuda.so.1")
    except OSError:
        return 0
    n = ctypes.c_int(0)
    if cu.cuInit(0) or cu.cuDeviceGetCount(ctypes.byref(n)):
        return 0
    return n.value


def commit():
    """The commit a bench table names: GPUFILE_BENCH_COMMIT where set (GPUFILE_COMMIT, its older
    spelling, next), else `git rev-parse --short HEAD` of this checkout, else "unknown". The
    device machine's copy of the tree may carry a .git of an older commit, so a run there should
    set the variable to the commit it copied."""
    named = os.environ.get("GPUFILE_BENCH_COMMIT") or os.environ.get("GPUFILE_COMMIT")
    if named:
        return named
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        found = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True).stdout.strip()
    except FileNotFoundError:
        found = ""
    return found or "unknown"


def machine(shell):
    """{gpus, cores, kernel, commit} of this run: nvidia-smi's names, os.cpu_count, uname, and
    commit()."""
    try:
        p = shell.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        gpus = "; ".join(sorted(set(p.stdout.strip().splitlines()))) or "no GPU"
    except FileNotFoundError:
        gpus = "no GPU (no nvidia-smi)"
    return {"gpus": gpus, "cores": os.cpu_count(), "kernel": platform.release(), "commit": commit()}


def multi_gpu_args(ap):
    """The flags bench/host_model.py and bench/multi_gpu.py share: the build, the output folder,
    the data files' directory and size, and how many GPUs."""
    ap.add_argument("--build", default="/tmp/gb", help="the build with cli/gpufile and bench/gpufile_compare")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpufile-out"))
    ap.add_argument("--dir", default="/root", help="the ext4 directory of the data files (/root)")
    ap.add_argument("--size-mib", type=int, default=4096, help="each GPU's data file (4096 MiB)")
    ap.add_argument("--gpus", type=int, default=0, help="use the first N GPUs (default: all)")


def gpu_files(directory, gpus, size, say=print):
    """One data file of `size` random bytes a GPU, DIR/gpufile-gpu<g>.bin (the pattern for
    gpufile_compare is DIR/gpufile-gpu%d.bin), made side by side where missing or of another
    size, synced; then each read twice through the page cache (warm). Kept for the next
    harness of the same call (host-model.sh, then multi-gpu-run.sh)."""
    paths = [os.path.join(directory, f"gpufile-gpu{g}.bin") for g in range(gpus)]
    missing = [f for f in paths if not os.path.exists(f) or os.path.getsize(f) != size]
    with ThreadPoolExecutor(max(1, gpus)) as pool:
        if missing:
            say(f"data: {len(missing)} files of {size // MIB} MiB of random bytes in {directory}")
            list(pool.map(lambda f: make_random_file(f, size, sync=False), missing))
            os.sync()
        list(pool.map(lambda f: warm(f, 2), paths))
    return paths


def h2d_together(shell, tool, source, gpu_sets, seconds, timeout):
    """`gpufile_compare h2d-all` (8 threads a GPU, 16 MiB copies, from pinned memory with source
    "-", else from the registered files of that pattern), one process for each comma list of
    GPUs in `gpu_sets`, started together; with more than one process the copies start at one
    moment after every set-up (GPUFILE_COMPARE_START_AT), so that they overlap. The processes'
    parse_compare results, in order."""
    cmds = [[tool, "h2d-all", "8", "16384", str(seconds), source, s] for s in gpu_sets]
    envs = None
    if len(cmds) > 1:  # a context, 1 GiB pinned or a file registered, before the stretch
        envs = [{"GPUFILE_COMPARE_START_AT": f"{time.time() + 4 + 0.25 * len(cmds):.3f}"}] * len(cmds)
    return cmds, [parse_compare(p) for p in shell.run_together(cmds, envs, timeout)]


def make_random_file(path, size, sync=True):
    """`size` bytes from /dev/urandom, written in 16 MiB pieces and synced."""
    with open("/dev/urandom", "rb") as src, open(path, "wb") as dst:
        for done in range(0, size, 16 * MIB):
            dst.write(src.read(min(16 * MIB, size - done)))
    if sync:
        os.sync()


class DriverArray:
    """GPU memory straight from the CUDA driver (cuMemAlloc through ctypes), which KvikIO and
    the like take through __cuda_array_interface__: a worker then needs neither torch nor CuPy,
    and runs on the CUDA test double too."""

    def __init__(self, nbytes):
        cu = ctypes.CDLL(os.environ.get("GPUFILE_CUDA_LIBRARY") or "libcuda.so.1")
        ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
        if (cu.cuInit(0) or cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) or
                cu.cuCtxSetCurrent(ctx) or cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes))):
            raise RuntimeError(f"the CUDA driver did not allocate {nbytes} bytes")
        self.cu = cu
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr.value, False), "version": 3}

    def synchronize(self):
        self.cu.cuCtxSynchronize()


# ---- which libcufile a process runs on -------------------------------------------------------

def mapped_libcufile():
    """The files named libcufile* that this process has mapped."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libcufile" in line and "/" in line}
    return sorted(paths)


class _OpCounter(ctypes.Structure):
    _fields_ = [("ok", ctypes.c_uint64), ("err", ctypes.c_uint64)]


class StatsL1(ctypes.Structure):
    """The head of CUfileStatsLevel1_t (512 bytes): op counters, then the byte counts."""
    _fields_ = [("read_ops", _OpCounter), ("write_ops", _OpCounter),
                ("hdl_register_ops", _OpCounter), ("hdl_deregister_ops", _OpCounter),
                ("buf_register_ops", _OpCounter), ("buf_deregister_ops", _OpCounter),
                ("read_bytes", ctypes.c_uint64), ("write_bytes", ctypes.c_uint64),
                ("rest", ctypes.c_uint8 * (512 - 112))]


def loaded_cufile():
    """The libcufile.so.0 this process already runs on (as a client's dlopen finds it by its
    soname), or None."""
    try:
        return ctypes.CDLL("libcufile.so.0", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def cufile_stats_on(lib):
    """Level-1 statistics from now on (cuFileSetStatsLevel); False where the library refuses."""
    return lib is not None and lib.cuFileSetStatsLevel(ctypes.c_int(1)) == 0


def cufile_read_stats(lib):
    """(read calls that succeeded, bytes read) so far, from cuFileGetStatsL1; None on failure."""
    s = StatsL1()
    lib.cuFileGetStatsL1.restype = ctypes.c_int  # CUfileError_t's first field: the error code
    if lib.cuFileGetStatsL1(ctypes.byref(s)) != 0:
        return None
    return s.read_ops.ok, s.read_bytes


def pinned_host(size):
    """A pinned host buffer of `size` bytes (CuPy); pageable NumPy memory under the CPU stand-in
    of CuPy (bench/standin)."""
    import cupy as cp
    import numpy as np
    if hasattr(cp.cuda, "alloc_pinned_memory"):
        return np.frombuffer(cp.cuda.alloc_pinned_memory(size), np.uint8, size)
    return np.empty(size, dtype=np.uint8)


def pinned_ceiling(size, repeat=5):
    """Pinned host-to-device copies of `size` bytes through CuPy, GiB/s, best of `repeat`: the
    ceiling a harness's reads into GPU memory are measured against. None under the stand-in (it
    has no pinned memory)."""
    import time
    import cupy as cp
    if not hasattr(cp.cuda, "alloc_pinned_memory"):
        return None
    host = pinned_host(size)
    host[::4096] = 1
    dev = cp.empty(size, dtype=cp.uint8)
    best = 0.0
    for _ in range(repeat):
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        dev.set(host)
        cp.cuda.runtime.deviceSynchronize()
        best = max(best, size / GIB / (time.perf_counter() - t0))
    return best


def two_reads_cells(r, ceiling):
    """The cells of a row of a first-and-second-read harness (remote_gpu.py, zarr_gpu.py: their
    workers' first_gib_s and second_gib_s): [first, second, share of the ceiling], or one
    cell saying why there is no number (skipped, or the worker's last line of failure)."""
    if "skipped" in r:
        return [f"skipped: {r['skipped']}"]
    if "error" in r:
        last = r["error"].splitlines()[-1] if r["error"] else "no result"
        return [f"FAILED: {last[:120]}"]
    share = "-"
    if ceiling:
        share = " / ".join(f"{100 * r[k] / ceiling:.0f}%" for k in ("first_gib_s", "second_gib_s"))
    return [f"{r['first_gib_s']:.2f}", f"{r['second_gib_s']:.2f}", share]


if __name__ == "__main__":  # for the shell harnesses: `python3 bench/benchlib.py commit`
    if sys.argv[1:] != ["commit"]:
        sys.exit("usage: benchlib.py commit")
    print(commit())
