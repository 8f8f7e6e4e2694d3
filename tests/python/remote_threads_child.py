"""Run by test_remote.py's thread-count test in a process of its own, so that the remote pool's
size is this process's settings' alone. Holds many Futures in flight against a server whose GETs
wait at a gate, counts the process's threads (/proc/self/task) meanwhile, then lets the GETs
through and checks every byte. Prints one JSON line: the counts."""
import json
import os
import sys
import threading
import time

import numpy as np

import gpufile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from range_server import RangeServer  # noqa: E402

PART = 64 << 10
FUTURES = int(sys.argv[1])
CONCURRENCY = int(sys.argv[2])


def thread_names():
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # ended meanwhile
            pass
    return names


def native_threads():
    """Threads that are not Python's (the server's handlers are)."""
    return len(thread_names()) - threading.active_count()


def main():
    for key, value in {"remote_part_kb": PART >> 10, "remote_concurrency": CONCURRENCY,
                       "remote_transfers_per_thread": 2,
                       "remote_retries": 0, "remote_timeout_s": 120}.items():
        gpufile.set_setting("gpufile." + key, value)
    data = np.random.default_rng(7).integers(0, 256, size=FUTURES * 2 * PART, dtype=np.uint8)
    with RangeServer() as server:
        server.put("/data.bin", data.tobytes())
        with gpufile.open(server.base + "/data.bin") as f:
            before = native_threads()
            server.gate.clear()
            outs = [np.zeros(2 * PART, dtype=np.uint8) for _ in range(FUTURES)]
            futures = [f.pread(o, file_offset=i * 2 * PART) for i, o in enumerate(outs)]
            deadline = time.monotonic() + 120
            while sum(r[0] == "GET" for r in server.requests) < CONCURRENCY // 2:
                assert time.monotonic() < deadline, "the GETs never arrived"
                time.sleep(0.01)
            held = sum(r[0] == "GET" for r in server.requests)
            pool = max(thread_names().count("gpufile-remote") for _ in range(20))
            native = max(native_threads() for _ in range(20)) - before
            server.gate.set()
            results = [fu.result(timeout=300) for fu in futures]
    assert results == [2 * PART] * FUTURES, results
    for i, o in enumerate(outs):
        assert np.array_equal(o, data[i * 2 * PART:(i + 1) * 2 * PART]), i
    print(json.dumps({"pool": pool, "native": native, "held": held}))


main()
