"""`gpufile stats PID` end to end: tests/cli/stats_pid_process.cpp (a gpufile program with stats
level 3) does IO and prints its own statistics; the CLI, reading the process's shared-memory
segment, must show the same numbers (totals, paths, latency histograms and percentiles, device
rows). Then: the segment goes when stats go off and when the process exits; one left by a process
that died, or by an earlier process with the same pid, is removed by the reader; a process with
stats off publishes nothing; a segment of another layout version is refused with a message naming
it.

Usage: stats_pid_test.py GPUFILE_CLI STATS_PID_PROCESS
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

CLI, PROCESS = sys.argv[1], sys.argv[2]
TIMEOUT = 60


def segment(pid):
    return f"/dev/shm/gpufile-stats-{pid}"


def cli(*args):
    return subprocess.run([CLI, "stats", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT)


class Process:
    def __init__(self, path):
        self.p = subprocess.Popen([PROCESS, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        self.stats = json.loads(self.p.stdout.readline())
        self.pid = self.p.pid

    def command(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        if line in ("exit", "die"):
            assert self.p.wait(timeout=TIMEOUT) == 0
            return None
        self.stats = json.loads(self.p.stdout.readline())
        return self.stats


def check_same(own, shown):
    """The CLI's numbers are the process's own."""
    assert shown["pid"] == own["pid"] and shown["level"] == own["level"], (own, shown)
    for op in ("read", "write"):
        for key in ("calls_ok", "calls_failed", "bytes", "caller_bytes", "worker_bytes"):
            assert shown[op][key] == own[op][key], (op, key, own[op], shown[op])
        assert set(shown[op]["paths"]) == set(own[op]["paths"]), (op, shown[op]["paths"])
        for name, path in own[op]["paths"].items():
            for key in ("bytes", "ops"):
                assert shown[op]["paths"][name][key] == path[key], (op, name, path, shown[op])
        # The latency histogram over all paths, and the percentiles derived from it.
        assert shown[op]["latency"]["buckets"] == own[op]["latency"]["buckets"], (op, shown[op])
        assert shown[op]["latency"]["p50_us"] == own[op]["latency"]["p50_us"], (op, shown[op])
        assert shown[op]["latency"]["max_us"] == own[op]["latency"]["max_us"], (op, shown[op])
    assert shown["devices"] == own["devices"], (own["devices"], shown["devices"])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(5 << 20))

        # Counters while the process runs, twice: they follow its IO.
        proc = Process(path)
        assert os.path.exists(segment(proc.pid)), "no segment while stats are on"
        for round_ in (1, 2):
            own = proc.command("io")
            assert own["read"]["bytes"] == round_ * (5 << 20), own
            assert own["write"]["bytes"] == round_ * (5 << 20), own
            r = cli(proc.pid, "--once", "--json")
            assert r.returncode == 0, r.stderr
            shown = json.loads(r.stdout)
            assert shown["layout_version"] == 3, shown  # what the keys below follow
            check_same(own, shown)
            # Level 3 fills the size histogram: 4K, 16K, 64K, 256K and 1M reads, one 5M write.
            assert sum(shown["read"]["size_hist"]) == own["read"]["calls_ok"], shown["read"]
            assert sum(1 for n in shown["read"]["size_hist"] if n) >= 4, shown["read"]["size_hist"]
            # Every call timed (level 2+), each under its path; all into host memory (level 3).
            for op in ("read", "write"):
                calls = own[op]["calls_ok"]
                assert sum(shown[op]["latency"]["buckets"]) == calls, shown[op]["latency"]
                per_path = sum(sum(p["latency"]["buckets"]) for p in shown[op]["paths"].values())
                assert per_path == calls, shown[op]["paths"]
                assert shown[op]["latency"]["p50_us"] <= shown[op]["latency"]["max_us"]
                for q in ("p50_us", "p90_us", "p99_us", "p99.9_us", "max_us"):
                    assert shown[op]["latency"][q] >= 1, (q, shown[op]["latency"])
                host = shown["devices"]["host"][op]
                assert host["calls_ok"] == calls and host["bytes"] == own[op]["bytes"], host
            assert list(shown["devices"]) == ["host"], shown["devices"]
            assert shown["read"]["paths"]["remote"]["bytes"] == 0
        text = cli(proc.pid, "--once")
        assert text.returncode == 0, text.stderr
        assert f"pid {proc.pid}, level 3" in text.stdout, text.stdout
        assert "read" in text.stdout and "paths:" in text.stdout, text.stdout
        # gds_stats-like sections: percentiles per operation and path, a row per device.
        assert "latency, us" in text.stdout and "p99.9" in text.stdout, text.stdout
        assert "all paths" in text.stdout, text.stdout
        assert "host" in text.stdout and "GiB read" in text.stdout, text.stdout

        # Live: a line a refresh, until the process exits; then the segment is gone.
        live = subprocess.Popen([CLI, "stats", str(proc.pid), "--json", "--interval", "0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = json.loads(live.stdout.readline())
        check_same(proc.stats, first)
        proc.command("exit")
        out, err = live.communicate(timeout=TIMEOUT)
        assert live.returncode == 0 and "exited" in err, (live.returncode, err)
        assert not os.path.exists(segment(proc.pid)), "the segment outlived its process"

        # Stats turned off at run time: the segment goes, the CLI says why there is nothing.
        proc = Process(path)
        proc.command("io")
        own = proc.command("off")
        assert own["level"] == 0
        assert not os.path.exists(segment(proc.pid)), "the segment outlived stats"
        r = cli(proc.pid, "--once")
        assert r.returncode == 1 and "publishes no gpufile stats" in r.stderr, r
        proc.command("exit")

        # A process that dies without its exit handlers leaves its segment: the reader finds
        # the process gone and removes it.
        proc = Process(path)
        proc.command("io")
        proc.command("die")
        assert os.path.exists(segment(proc.pid)), "the killed process left no segment to clean"
        r = cli(proc.pid, "--once")
        assert r.returncode == 1, r
        assert f"no process {proc.pid}" in r.stderr and "removed 1 stale" in r.stderr, r.stderr
        assert not os.path.exists(segment(proc.pid)), "the stale segment is still there"
        r = cli(proc.pid, "--once")
        assert r.returncode == 1 and "removed" not in r.stderr, r.stderr

    # A segment of another layout version (an older or newer gpufile) for a live process: the
    # reader refuses it and says which version it found; the segment stays (it is not stale).
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with open(segment(sleeper.pid), "wb") as f:
            f.write(struct.pack("<II", 0x54534647, 1) + bytes(256))
        for args in (("--once",), ("--once", "--json")):
            r = cli(sleeper.pid, *args)
            assert r.returncode == 1 and r.stdout == "", r
            assert "layout version 1" in r.stderr and "reads version" in r.stderr, r.stderr
        assert os.path.exists(segment(sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
        if os.path.exists(segment(sleeper.pid)):
            os.unlink(segment(sleeper.pid))

    # A segment naming a live process but left by an earlier one with the same pid (its start
    # time differs): the reader removes it rather than show its numbers.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        header = struct.pack("<IIQqQQQ", 0x54534647, 1, 0, sleeper.pid, 1, 0, 0)
        with open(segment(sleeper.pid), "wb") as f:
            f.write(header + bytes(1 << 16))
        r = cli(sleeper.pid, "--once")
        assert r.returncode == 1 and "publishes no gpufile stats" in r.stderr, r
        assert "removed 1 stale" in r.stderr, r.stderr
        assert not os.path.exists(segment(sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
        if os.path.exists(segment(sleeper.pid)):
            os.unlink(segment(sleeper.pid))
    print("stats_pid: ok")


main()
