#!/usr/bin/env python3
"""A remote object into GPU memory over loopback HTTP: gpufile's RemoteFile against KvikIO's
RemoteFile, a plain urllib GET, a hand-written loader (threads of ranged GETs into pinned
memory, then one copy) and, where an S3 endpoint is given, boto3; every number from one run,
every byte checked (issue 12).

    python3 bench/remote_gpu.py [--size-gib 2] [--threads 16] [--part-mib 16] [--repeat 1]
                                [--serve file|memory] [--dir /tmp]
                                [--native-server BUILD/bench/gpufile_http_serve]
                                [--s3 s3://BUCKET/KEY] [--json rows.json]

Needs NumPy and CuPy (or bench/standin's stand-in), gpufile; KvikIO and boto3 where present.

The server is tests/support/range_server.py's RangeServer (HTTP/1.1 with Range and If-Match, a
thread per connection) on 127.0.0.1, in this process. RangeServer keeps its objects in memory
(a bytes object, each ranged GET copying its slice in Python: --serve memory); by default the
object is written to a file in --dir, read twice so the page cache holds it, and served from
there by sendfile (a subclass here, same replies). The server is Python either way, so its own
speed bounds every case alike; the server row measures what it sends.

With --native-server, bench/http_serve.cpp's server serves the file instead (native threads,
HTTP/1.1 keep-alive, sendfile: nothing of Python between the page cache and the socket), and
the server row is that program's sink: the same ranged GETs on --threads keep-alive connections,
each body received into a small buffer and dropped (first and second read are its two rounds).
It is the issue's "what the server can serve over loopback", measured with a client that does
no more than any client must.

Cases, each in a fresh process, so that first-call costs (CUDA context, driver open, pinning,
connections) land in the first read:
  ceiling          pinned host-to-device copy of the same size through CuPy, best of 5
  gpufile          gpufile.open(url).read(device array), default settings
  gpufile-c32-p16M the same with GPUFILE_REMOTE_CONCURRENCY=32, GPUFILE_REMOTE_PART_KB=16384
                   (--gpufile-sweep c16-p8M,c64-p4M,c16-p8M-t1,... adds more such cases, one per
                   setting; -tK sets GPUFILE_REMOTE_TRANSFERS_PER_THREAD)
  kvikio           kvikio.RemoteFile.open_http(url).read(device array), KvikIO's defaults
  kvikio-t16       the same with KVIKIO_NTHREADS=16, KVIKIO_TASK_SIZE=16 MiB
  urllib           urllib.request.urlopen(url).read(), then cupy.asarray (the naive way)
  urllib-parallel  --threads threads, each with its own http.client connection, ranged GETs of
                   --part-mib into one pinned host buffer (pinned at the first read, reused),
                   then one copy to the device array: the hand-written loader
  server           the same ranged GETs into the same pinned buffer, without the copy to the
                   device (it runs after the clock stops, for the check): what the server sends
                   over loopback to a client of --threads connections, the ceiling of the
                   network half of every case
  boto3, boto3-transfer, gpufile-s3  with --s3 and AWS_ENDPOINT_URL(_S3) set and boto3
                   importable: the object is uploaded there once, then get_object().read() +
                   cupy.asarray (one GET); download_fileobj with a TransferConfig of --threads
                   threads and --part-mib parts into memory + cupy.asarray (boto3 tuned as its
                   users tune it); and gpufile.open("s3://...").read(device array)

A read is open + read of the whole object + close, into a device array allocated before the
timer starts; the second read runs in the same process into the same array, zeroed between.
Both are checked byte for byte against the object (regenerated in the worker from its seed).
Each read also records its CPU use: the worker's cores (user and system seconds per second of
the read) and the share of the machine's cores busy meanwhile, the server's included. Over
loopback the server shares the client's cores: a machine near 100% busy bounds every client.

Without a GPU, it runs end to end against the CUDA driver test double with the CuPy stand-in
(no ceiling, the parallel loader's buffer pageable; timings meaningless):
    GPUFILE_CUDA_LIBRARY=<build>/tests/support/fakecuda/libcuda.so.1 \\
      PYTHONPATH=bench/standin:<gpufile on the path> python3 bench/remote_gpu.py --size-gib 0.05
"""
import argparse
import http.client
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

from benchlib import installed, pinned_ceiling, pinned_host, run_fresh, two_reads_cells

GIB = 1 << 30
MIB = 1 << 20
SEED = 12
OBJECT_PATH = "/bench/object.bin"

# (case, environment of its worker) in the table's order; the S3 cases are added with --s3.
HTTP_CASES = [
    ("gpufile", {}),
    ("gpufile-c32-p16M", {"GPUFILE_REMOTE_CONCURRENCY": "32", "GPUFILE_REMOTE_PART_KB": "16384"}),
    ("kvikio", {}),
    ("kvikio-t16", {"KVIKIO_NTHREADS": "16", "KVIKIO_TASK_SIZE": str(16 * MIB)}),
    ("urllib", {}),
    ("urllib-parallel", {}),
    ("server", {}),
]
S3_CASES = [("boto3", {}), ("boto3-transfer", {}), ("gpufile-s3", {})]


def object_bytes(size):
    """The object's content: `size` pseudo-random bytes from SEED (NumPy, as uint8)."""
    import numpy as np
    words = np.random.default_rng(SEED).integers(0, 1 << 63, size=(size + 7) // 8,
                                                 dtype=np.uint64)
    return words.view(np.uint8)[:size]


# ---- the worker: one case in a fresh process -------------------------------------------------

def zero(dev):
    import cupy as cp
    dev.fill(0)
    cp.cuda.runtime.deviceSynchronize()


def read_gpufile(spec, dev, state):
    import gpufile
    with gpufile.open(spec["url"]) as f:
        n = f.read(dev)
    if n != spec["size"]:
        raise RuntimeError(f"gpufile read {n} of {spec['size']} bytes")
    return dev


def read_kvikio(spec, dev, state):
    import kvikio
    with kvikio.RemoteFile.open_http(spec["url"]) as f:
        n = f.read(dev)
    if n != spec["size"]:
        raise RuntimeError(f"kvikio read {n} of {spec['size']} bytes")
    return dev


def read_urllib(spec, dev, state):
    """What a first try looks like: the whole body as bytes, then a new device array."""
    import cupy as cp
    import numpy as np
    with urllib.request.urlopen(spec["url"]) as r:
        body = r.read()
    if len(body) != spec["size"]:
        raise RuntimeError(f"urllib got {len(body)} of {spec['size']} bytes")
    return cp.asarray(np.frombuffer(body, dtype=np.uint8))


def get_range(conn, path, first, view):
    """One ranged GET of len(view) bytes at `first` into `view`, on a kept-alive connection."""
    last = first + len(view) - 1
    conn.request("GET", path, headers={"Range": f"bytes={first}-{last}"})
    r = conn.getresponse()
    if r.status != 206 or r.getheader("Content-Range", "").split("/")[0] != f"bytes {first}-{last}":
        raise RuntimeError(f"GET bytes={first}-{last}: {r.status} {r.getheader('Content-Range')}")
    got = 0
    while got < len(view):
        n = r.readinto(view[got:])
        if not n:
            raise RuntimeError(f"GET bytes={first}-{last}: the body ended after {got} bytes")
        got += n
    if r.read(1):
        raise RuntimeError(f"GET bytes={first}-{last}: more bytes than asked for")


def read_parallel(spec, dev, state, copy=True):
    """The hand-written loader: threads take the next part from a shared counter, each through
    its own connection; the parts land in one pinned buffer, then one copy to the device (none
    with copy=False: the caller copies after its clock stopped)."""
    import cupy as cp
    size, part = spec["size"], spec["part_mib"] * MIB
    if "host" not in state:
        state["host"] = pinned_host(size)
    host = memoryview(state["host"])
    url = urllib.parse.urlsplit(spec["url"])
    next_part, lock, failures = [0], threading.Lock(), []

    def fetch():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        try:
            while not failures:
                with lock:
                    first = next_part[0]
                    next_part[0] += part
                if first >= size:
                    return
                get_range(conn, url.path, first, host[first:min(first + part, size)])
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            failures.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=fetch) for _ in range(spec["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    if not copy:
        return None
    dev.set(state["host"])
    cp.cuda.runtime.deviceSynchronize()
    return dev


def read_server(spec, dev, state):
    return read_parallel(spec, dev, state, copy=False)


def read_boto3(spec, dev, state):
    import boto3
    import cupy as cp
    import numpy as np
    bucket, key = s3_parts(spec["s3"])
    if "client" not in state:
        state["client"] = boto3.client("s3")
    body = state["client"].get_object(Bucket=bucket, Key=key)["Body"].read()
    if len(body) != spec["size"]:
        raise RuntimeError(f"boto3 got {len(body)} of {spec['size']} bytes")
    return cp.asarray(np.frombuffer(body, dtype=np.uint8))


def read_boto3_transfer(spec, dev, state):
    import boto3
    import boto3.s3.transfer
    import cupy as cp
    import numpy as np
    bucket, key = s3_parts(spec["s3"])
    if "client" not in state:
        state["client"] = boto3.client("s3")
    config = boto3.s3.transfer.TransferConfig(max_concurrency=spec["threads"],
                                              multipart_chunksize=spec["part_mib"] * MIB,
                                              multipart_threshold=spec["part_mib"] * MIB)
    body = io.BytesIO()
    state["client"].download_fileobj(bucket, key, body, Config=config)
    got = body.seek(0, io.SEEK_END)  # parts land out of order: the end, not the last position
    if got != spec["size"]:
        raise RuntimeError(f"boto3 download_fileobj got {got} of {spec['size']} bytes")
    return cp.asarray(np.frombuffer(body.getbuffer(), dtype=np.uint8))


def read_gpufile_s3(spec, dev, state):
    return read_gpufile(dict(spec, url=spec["s3"]), dev, state)


READERS = {"gpufile": read_gpufile, "kvikio": read_kvikio,
           "kvikio-t16": read_kvikio, "urllib": read_urllib, "urllib-parallel": read_parallel,
           "server": read_server, "boto3": read_boto3, "boto3-transfer": read_boto3_transfer,
           "gpufile-s3": read_gpufile_s3}


def machine_cpu():
    """(busy, total) jiffies of every core since boot, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


def timed_read(spec, dev, state):
    """(what the reader returned, seconds, CPU use): the CPU use says whether a read was bound by
    the CPU of a machine its server shares: this process's cores (user + system seconds per
    second) and the share of all the machine's cores busy, the server's included."""
    import cupy as cp
    import resource
    cp.cuda.runtime.deviceSynchronize()
    r0, m0 = resource.getrusage(resource.RUSAGE_SELF), machine_cpu()
    t0 = time.perf_counter()
    # gpufile-cN-pNM: gpufile with other settings (HTTP_CASES and --gpufile-sweep)
    reader = read_gpufile if spec["case"].startswith("gpufile-c") else READERS[spec["case"]]
    out = reader(spec, dev, state)
    cp.cuda.runtime.deviceSynchronize()
    seconds = time.perf_counter() - t0
    r1, m1 = resource.getrusage(resource.RUSAGE_SELF), machine_cpu()
    own = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / seconds
    busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
    return out, seconds, {"client_cores": round(own, 1), "machine_busy": round(busy, 2)}


def library_settings(case):
    """The settings the library ran with, as it reports them: the table shows the environment,
    this shows that it took effect."""
    if case.startswith("gpufile"):
        import gpufile
        return {k: v for k, v in gpufile.settings().items() if k.startswith("gpufile.remote_")}
    if case.startswith("kvikio"):
        import kvikio.defaults
        try:
            return {k: kvikio.defaults.get(k) for k in ("num_threads", "task_size")}
        except Exception as e:  # noqa: BLE001 (an older KvikIO: the read itself still counts)
            return {"error": f"kvikio.defaults.get: {e}"}
    return {}


def worker(spec):
    """One case in this process; prints RESULT {json}."""
    if spec["case"] == "ceiling":
        ceiling = pinned_ceiling(spec["size"])
        print("RESULT " + json.dumps(dict(spec, ok=True, ceiling_gib_s=ceiling)), flush=True)
        return
    import cupy as cp
    size = spec["size"]
    expected = cp.asarray(object_bytes(size))  # on the device, made before the timer starts
    dev = cp.empty(size, dtype=cp.uint8)
    zero(dev)
    state, result = {}, dict(spec, checked_bytes=0)
    for label in ("first", "second"):
        out, seconds, cpu = timed_read(spec, dev, state)
        if out is None:  # the server case: its bytes reach the device for the check only
            dev.set(state["host"])
            out = dev
        ok = bool(cp.array_equal(out, expected))
        result[label + "_s"] = seconds
        result[label + "_gib_s"] = size / GIB / seconds
        result[label + "_ok"] = ok
        result[label + "_cpu"] = cpu
        result["checked_bytes"] += size if ok else 0
        zero(dev)
    result["ok"] = result["first_ok"] and result["second_ok"]
    result["library_settings"] = library_settings(spec["case"])
    print("RESULT " + json.dumps(result), flush=True)


# ---- the parent: server, object, cases, table ------------------------------------------------

def s3_parts(url):
    u = urllib.parse.urlsplit(url)
    return u.netloc, u.path.lstrip("/")


def s3_skip_reason(args):
    """Why the S3 cases do not run, or None when they do."""
    if not args.s3:
        return "no --s3 s3://BUCKET/KEY given"
    if not (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")):
        return "no AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL set"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 not installed"
    return None


def upload_s3(args, data):
    """Puts the object at --s3 (boto3's managed upload: multipart for large objects)."""
    import boto3
    bucket, key = s3_parts(args.s3)
    boto3.client("s3").upload_fileobj(io.BytesIO(data), bucket, key)


def run_case(spec, env):
    return run_fresh(__file__, spec, extra={"env": env}, env=env)


def file_range_server(path, url_path):
    """RangeServer, with `url_path` served from the file at `path` by sendfile (the page cache
    straight to the socket, no copy in Python and no GIL held while it sends): the server's
    ceiling then sits well above the in-memory mode's, where each GET copies its slice of a
    bytes object. Same replies as RangeServer: HEAD with size and ETag, If-Match (412 for
    another ETag), 206 with Content-Range for a range, 200 with the whole object without one.
    Every other path is RangeServer's own (objects put in memory)."""
    import re
    from range_server import RangeServer, _FullHandler
    etag = f'"file-{os.stat(path).st_mtime_ns}"'
    size = os.stat(path).st_size

    class Handler(_FullHandler):
        def do_HEAD(self):
            if self.path.split("?")[0] != url_path:
                return super().do_HEAD()
            self.server.record(self)
            self.send_response(200)
            for k, v in (("Content-Length", size), ("ETag", etag), ("Accept-Ranges", "bytes")):
                self.send_header(k, str(v))
            self.end_headers()

        def do_GET(self):
            if self.path.split("?")[0] != url_path:
                return super().do_GET()
            self.server.record(self)
            if self.headers.get("If-Match", etag) != etag:
                return self._reply(412, b"<Error><Code>PreconditionFailed</Code></Error>")
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            first, last = (int(m.group(1)), min(int(m.group(2)), size - 1)) if m else (0, size - 1)
            self.send_response(206 if m else 200)
            self.send_header("ETag", etag)
            if m:
                self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.send_header("Content-Length", str(last + 1 - first))
            self.end_headers()
            self.send_file_range(first, last + 1 - first)

        def send_file_range(self, offset, count):
            with open(path, "rb") as f:
                while count > 0:
                    sent = os.sendfile(self.connection.fileno(), f.fileno(), offset, count)
                    if sent == 0:
                        raise ConnectionError(f"{path} ended at {offset}")
                    offset, count = offset + sent, count - sent

    class Server(RangeServer):
        # socketserver listens with a backlog of 5: a client opening 16 or more connections at
        # once (every transfer of a part is a new connection: the handler answers HTTP/1.0)
        # would see some of its connects dropped and retried a second later.
        request_queue_size = 1024

    server = Server()
    server.RequestHandlerClass = Handler
    return server


class NativeServer:
    """bench/http_serve.cpp's server of one file (every path), ended when its stdin closes."""

    def __init__(self, binary, path):
        self.binary = binary
        self.proc = subprocess.Popen([binary, "serve", path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if line[:1] != ["port"]:
            self.proc.kill()
            raise SystemExit(f"{binary} serve {path} did not start")
        self.port = int(line[1])
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def sink(self, spec):
        """The server row: the sink's two rounds as the first and second read."""
        size, threads, part = spec["size"], spec["threads"], spec["part_mib"]
        p = subprocess.run([self.binary, "sink", str(self.port), str(size), str(threads), str(part),
                            "2"], capture_output=True, text=True, timeout=600)
        rounds = re.findall(r"round \d+: \d+ bytes in ([\d.]+) s", p.stdout)
        if p.returncode != 0 or len(rounds) != 2:
            return dict(spec, ok=False, error=(p.stdout + p.stderr).strip()[-2000:])
        first, second = (float(x) for x in rounds)
        # Every byte was received (the sink counts them); none was compared with the object.
        return dict(spec, ok=True, first_s=first, second_s=second, first_gib_s=size / GIB / first,
                    second_gib_s=size / GIB / second, checked_bytes=0, received_bytes=2 * size)


def start_server(args, data):
    """The server of the object at OBJECT_PATH: the RangeServer from a file in --dir (warm in the
    page cache) or from memory (--serve memory), or --native-server from that file. Returns
    (server, file to remove or None)."""
    if args.serve == "memory":
        from range_server import RangeServer
        server = RangeServer()
        server.put(OBJECT_PATH, data)
        return server, None
    path = os.path.join(args.dir, "gpufile_remote_bench.bin")
    with open(path, "wb") as f:
        f.write(data)
    for _ in range(2):  # the page cache holds it from here on (the second pass settles it)
        with open(path, "rb") as f:
            while f.read(64 * MIB):
                pass
    if args.native_server:
        return NativeServer(args.native_server, path), path
    return file_range_server(path, OBJECT_PATH), path


def run_all(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "support"))
    size = int(args.size_gib * GIB)
    base = dict(size=size, threads=args.threads, part_mib=args.part_mib, s3=args.s3)
    rows = [run_case(dict(base, case="ceiling"), {})]
    data = object_bytes(size).tobytes()
    cases = [c for c in HTTP_CASES if not args.cases or c[0] in args.cases.split(",")]
    cases += args.sweep
    skipped = {}
    reason = s3_skip_reason(args)
    if reason:
        skipped.update({case: reason for case, _ in S3_CASES})
    else:
        upload_s3(args, data)
        cases += S3_CASES
    server, path = start_server(args, data)
    del data  # the server keeps its own copy, in memory or in the file
    try:
        with server:
            run_cases(args, base, server, cases, rows, skipped)
    finally:
        if path:
            os.unlink(path)
    for case, why in skipped.items():
        rows.append(dict(base, case=case, skipped=why, ok=True))
    return rows


def sweep_cases(spec):
    """--gpufile-sweep's 'c32-p16M,c64-p8M' as gpufile cases with their settings."""
    cases = []
    for item in filter(None, (spec or "").split(",")):
        m = re.fullmatch(r"c(\d+)-p(\d+)M(?:-t(\d+))?", item)
        if not m:
            raise SystemExit(f"--gpufile-sweep: {item!r} is not cCONCURRENCY-pPART_MIBM[-tPER_THREAD]")
        env = {"GPUFILE_REMOTE_CONCURRENCY": m[1], "GPUFILE_REMOTE_PART_KB": str(int(m[2]) * 1024)}
        if m[3]:
            env["GPUFILE_REMOTE_TRANSFERS_PER_THREAD"] = m[3]
        cases.append((f"gpufile-{item}", env))
    return cases


def run_cases(args, base, server, cases, rows, skipped):
    for case, env in cases:
        if case.startswith("kvikio") and not installed("kvikio"):
            skipped[case] = "kvikio not installed"
            continue
        for _ in range(args.repeat):
            spec = dict(base, case=case, url=server.base + OBJECT_PATH)
            native_sink = case == "server" and isinstance(server, NativeServer)
            rows.append(server.sink(spec) if native_sink else run_case(spec, env))
        print(f"  {case}: done", file=sys.stderr, flush=True)


def print_table(rows, args):
    ceiling = next((r.get("ceiling_gib_s") for r in rows if r["case"] == "ceiling"), None)
    served = ("bench/http_serve.cpp's server, from a file" if args.native_server else
              f"RangeServer, from {args.serve}")
    print(f"{args.size_gib:g} GiB object over loopback HTTP ({served}) into GPU memory; each case "
          "a fresh process, first and second read in it\n")
    print("| case | settings | first read GiB/s | second read GiB/s | % of pinned H2D (first / "
          "second) | bytes checked | client cores, machine busy (first; second) |")
    print("|---|---|---|---|---|---|---|")
    order = [case for case, _ in HTTP_CASES + args.sweep + S3_CASES]
    cases = sorted((r for r in rows if r["case"] != "ceiling"),
                   key=lambda r: order.index(r["case"]))
    for r in cases:
        settings = " ".join(f"{k}={v}" for k, v in r.get("env", {}).items()) or "defaults"
        if r["case"] in ("urllib-parallel", "server", "boto3-transfer"):
            settings = f"{args.threads} threads x {args.part_mib} MiB"
        cells = two_reads_cells(r, ceiling)
        if len(cells) == 3:
            cells.append("received, not compared" if r.get("received_bytes") else
                         f"2 x {r['size']} ok" if r["ok"] else
                         f"MISMATCH (first {'ok' if r['first_ok'] else 'wrong'}, "
                         f"second {'ok' if r['second_ok'] else 'wrong'})")
            cells.append(cpu_cell(r))
        print("| " + " | ".join([r["case"], "-" if "skipped" in r else settings] + cells) + " |")
    if ceiling:
        print(f"| pinned host-to-device (CuPy, best of 5) | | {ceiling:.2f} | | 100% | | |")
    else:
        print("| pinned host-to-device | | not measured: CuPy stand-in (no GPU) | | | | |")


def cpu_cell(r):
    """"cores, busy%; cores, busy%" of a worker's two reads ("-" for the sink, not measured)."""
    if "first_cpu" not in r:
        return "-"
    return "; ".join(f"{r[k]['client_cores']:.1f}, {100 * r[k]['machine_busy']:.0f}%"
                     for k in ("first_cpu", "second_cpu"))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gib", type=float, default=2.0, help="object size (default 2)")
    ap.add_argument("--threads", type=int, default=16, help="urllib-parallel's threads")
    ap.add_argument("--part-mib", type=int, default=16, help="urllib-parallel's ranged GET size")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per case")
    ap.add_argument("--cases", help="only these of the HTTP cases above (comma-separated; sweep cases always run)")
    ap.add_argument("--gpufile-sweep", default="",
                    help="more gpufile cases, e.g. c16-p8M,c16-p8M-t1 (concurrency, part MiB, transfers per thread)")
    ap.add_argument("--serve", choices=("file", "memory"), default="file",
                    help="serve the object from a file in --dir by sendfile (default) or from "
                         "a bytes object in memory")
    ap.add_argument("--native-server", metavar="BIN",
                    help="serve the file with this gpufile_http_serve (bench/http_serve.cpp) "
                         "instead of the Python RangeServer; the server row is then its sink")
    ap.add_argument("--dir", default="/tmp", help="where the served file goes (removed after)")
    ap.add_argument("--s3", help="s3://BUCKET/KEY for the boto3 and gpufile-s3 cases (the bucket "
                                 "must exist at AWS_ENDPOINT_URL(_S3); the key is overwritten)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()
    args.sweep = sweep_cases(args.gpufile_sweep)
    if args.native_server and args.serve != "file":
        ap.error("--native-server serves the file: it does not go with --serve memory")
    rows = run_all(args)
    print_table(rows, args)
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print("FAILED:", json.dumps(r)[:3000])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
