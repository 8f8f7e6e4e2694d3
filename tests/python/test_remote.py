"""Remote objects over HTTP (gpufile.open("http://...")): round trips into host and "device"
memory, futures, and every fault mode of tests/support/range_server.py. docs/remote.md."""
import errno
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from conftest import device_bytes, needs_gpu_driver

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from range_server import RangeServer  # noqa: E402

PART = 64 << 10  # small parts, so that a few MiB span many ranged GETs


def use_settings(**settings):
    """Opens the driver afresh with these gpufile.remote_* settings (the next open takes them)."""
    gpufile.driver_close()
    base = {"remote_part_kb": PART >> 10, "remote_concurrency": 8, "remote_retries": 3,
            "remote_backoff_ms": 5, "remote_timeout_s": 2}
    base.update(settings)
    for key, value in base.items():
        gpufile.set_setting("gpufile." + key, value)


@pytest.fixture
def server():
    use_settings()
    with RangeServer() as s:
        yield s
    gpufile.driver_close()  # the next test opens with defaults again


@pytest.fixture
def obj(server, rng):
    """A 3 MiB + 123 byte object at /data.bin: (url, its bytes)."""
    data = rng.integers(0, 256, size=(3 << 20) + 123, dtype=np.uint8)
    server.put("/data.bin", data.tobytes())
    return server.base + "/data.bin", data


def ranged_gets(server):
    return [r for r in server.requests if r[0] == "GET"]


def test_read_into_host_memory_is_byte_exact(server, obj):
    url, data = obj
    with gpufile.open(url) as f:
        assert isinstance(f, gpufile.RemoteFile)
        assert f.size() == data.size
        out = np.zeros(data.size, dtype=np.uint8)
        assert f.read(out) == data.size
        etag = f.etag
    np.testing.assert_array_equal(out, data)
    gets = ranged_gets(server)
    assert len(gets) == -(-data.size // PART)  # one ranged GET per part
    assert etag and all(h.get("If-Match") == etag for _, _, h in gets)  # all pinned to one version


@needs_gpu_driver
def test_read_into_device_memory_is_byte_exact(server, obj):
    url, data = obj
    buf = gpufile.DeviceBuffer(data.size + 100)
    with gpufile.open(url) as f:
        pinned = gpufile.stats()["pinned_staging_bytes"]
        assert f.read(buf, data.size - 1000, file_offset=1000, buf_offset=100) == data.size - 1000
        # through the session's staging, pinned when the first remote read needed it
        assert gpufile.stats()["pinned_staging_bytes"] >= pinned + PART
    np.testing.assert_array_equal(device_bytes(buf, data.size - 1000, 100), data[1000:])
    gpufile.driver_close()
    assert gpufile.stats()["pinned_staging_bytes"] == 0  # and given back


def test_connections_are_reused(server, obj):
    url, data = obj
    out = np.zeros(data.size, dtype=np.uint8)
    with gpufile.open(url) as f:
        assert f.read(out) == data.size
        first = server.connections
        assert first <= 1 + 8  # the HEAD's, and at most one per GET in flight (concurrency 8)
        assert f.read(out) == data.size
        assert server.connections == first  # the second read opened none
    assert len(ranged_gets(server)) == 2 * -(-data.size // PART)


def test_offsets_and_the_end_of_the_object(server, obj):
    url, data = obj
    with gpufile.open(url) as f:
        out = np.zeros(5000, dtype=np.uint8)
        assert f.read(out, file_offset=data.size - 3000) == 3000  # short only at the end
        np.testing.assert_array_equal(out[:3000], data[-3000:])
        assert f.read(out, file_offset=data.size) == 0
        assert f.read(out, 10, file_offset=PART - 5) == 10  # across a part boundary
        np.testing.assert_array_equal(out[:10], data[PART - 5:PART + 5])


def test_futures_in_flight_together(server, obj):
    url, data = obj
    outs = [np.zeros(1 << 20, dtype=np.uint8) for _ in range(3)]
    with gpufile.open(url) as f:
        futures = [f.pread(o, file_offset=i << 20) for i, o in enumerate(outs)]
        assert [fu.result(timeout=30) for fu in futures] == [1 << 20] * 3
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o, data[i << 20:(i + 1) << 20])


def test_remote_reads_count_bytes_latency_and_device(server, obj):
    # The "remote" path of gpufile.stats(): bytes and pieces (always), a latency per call
    # (level 2), the device row of the memory read into (level 3: host memory here).
    url, data = obj
    gpufile.set_setting("profile.cufile_stats", 3)  # the driver opens with the first read
    out = np.zeros(1 << 20, dtype=np.uint8)
    with gpufile.open(url) as f:
        gpufile.stats_reset()
        assert f.read(out) == 1 << 20
        assert f.pread(out, 4096, file_offset=5).result(timeout=30) == 4096
    st = gpufile.stats()
    remote = st["read"]["paths"]["remote"]
    assert remote["bytes"] == (1 << 20) + 4096 and remote["ops"] == 2, remote
    assert st["read"]["bytes"] == remote["bytes"] and st["read"]["calls_ok"] == 2
    assert sum(remote["latency"]["buckets"]) == 2, remote["latency"]
    assert st["read"]["latency"]["buckets"] == remote["latency"]["buckets"]
    assert remote["latency"]["max_us"] >= remote["latency"]["p50_us"] >= 1
    assert st["devices"] == {"host": {"read": {"calls_ok": 2, "calls_failed": 0,
                                               "bytes": (1 << 20) + 4096},
                                      "write": {"calls_ok": 0, "calls_failed": 0, "bytes": 0}}}


def test_a_server_without_ranges(server, rng):
    server.ignore_range = True
    small = rng.bytes(PART // 2)
    server.put("/small", small)
    server.put("/big", rng.bytes(4 * PART))
    with gpufile.open(server.base + "/small") as f:  # one part: the whole object is what it asked
        out = np.zeros(len(small), dtype=np.uint8)
        assert f.read(out) == len(small) and out.tobytes() == small
    with gpufile.open(server.base + "/big") as f:
        before = len(ranged_gets(server))
        with pytest.raises(OSError, match="does the server support ranges"):
            f.read(np.zeros(4 * PART, dtype=np.uint8))
    assert len(ranged_gets(server)) - before <= 4  # not retried: the same reply would come again


def test_weak_etags_are_compared_but_not_sent_as_if_match(server, rng):
    server.weak_etags = True
    data = rng.bytes(3 * PART)
    server.put("/weak", data)
    with gpufile.open(server.base + "/weak") as f:
        assert f.etag.startswith("W/")
        out = np.zeros(len(data), dtype=np.uint8)
        assert f.read(out) == len(data) and out.tobytes() == data
        assert all("If-Match" not in h for _, _, h in ranged_gets(server))
        server.faults.arm("replace", times=1, replace_with=rng.bytes(len(data)))
        with pytest.raises(OSError, match="replaced") as e:
            f.read(out)
    assert e.value.errno == errno.ESTALE


def test_missing_object_is_file_not_found(server):
    with pytest.raises(FileNotFoundError, match="no such object"):
        gpufile.open(server.base + "/nothing-here")


def test_denied_is_permission_error(server, obj):
    url, _ = obj
    server.require_header = "Authorization"
    with pytest.raises(PermissionError, match="access denied"):
        gpufile.open(url)


@pytest.mark.parametrize("refusal", [403, 405, 501])
def test_a_server_that_refuses_head_is_asked_for_the_first_byte(server, obj, refusal):
    """A URL presigned for GET answers HEAD with 403 (the method is signed); some servers answer
    405 or 501. The object's size and ETag then come from a GET of its first byte."""
    url, data = obj
    server.faults.head_status = refusal
    with gpufile.open(url) as f:
        assert f.size() == data.size and f.etag
        out = np.zeros(data.size, dtype=np.uint8)
        assert f.read(out) == data.size
    np.testing.assert_array_equal(out, data)
    head, probe = server.requests[:2]
    assert (head[0], probe[0], probe[2].get("Range")) == ("HEAD", "GET", "bytes=0-0")


def test_refused_head_on_an_empty_object_and_without_ranges(server, rng):
    server.faults.head_status = 405
    server.put("/empty", b"")
    with gpufile.open(server.base + "/empty") as f:  # the 416's "bytes */0"
        assert f.size() == 0
        assert f.read(np.zeros(16, dtype=np.uint8)) == 0
    server.ignore_range = True  # the probe's answer is the whole object: its length, body cut off
    small = rng.bytes(PART // 2)
    server.put("/small", small)
    with gpufile.open(server.base + "/small") as f:
        assert f.size() == len(small)
        out = np.zeros(len(small), dtype=np.uint8)
        assert f.read(out) == len(small) and out.tobytes() == small


def test_refused_head_then_the_get_says_what_is_wrong(server, obj):
    url, _ = obj
    server.faults.head_status = 405
    with pytest.raises(FileNotFoundError, match=r"HTTP 404 \(GET bytes=0-0.*HEAD was refused too \(HTTP 405\)"):
        gpufile.open(server.base + "/nothing-here")
    server.require_header = "Authorization"  # HEAD and GET both 403
    with pytest.raises(PermissionError, match="access denied.*GET bytes=0-0.*HTTP 403"):
        gpufile.open(url)


def test_remote_objects_are_read_only(server, obj):
    url, _ = obj
    with pytest.raises(ValueError, match="read-only"):
        gpufile.open(url, "w")
    with gpufile.open(url) as f:
        with pytest.raises(io.UnsupportedOperation):
            f.write(np.zeros(4, dtype=np.uint8))


@pytest.mark.parametrize("fault", ["status", "kill", "truncate"])
def test_a_few_failures_are_retried(server, obj, fault):
    url, data = obj
    server.faults.arm(fault, times=3)  # each of three parts fails once, or one part three times
    out = np.zeros(data.size, dtype=np.uint8)
    with gpufile.open(url) as f:
        assert f.read(out) == data.size
    np.testing.assert_array_equal(out, data)
    assert server.faults.fired[fault] == 3
    assert len(ranged_gets(server)) == -(-data.size // PART) + 3


# A killed connection reads as a partial file (FIN) or, on some kernels' timing, a reset.
@pytest.mark.parametrize("fault, text", [("status", "HTTP 503"),
                                         ("kill", "(?i)partial file|receiving data|reset"),
                                         ("truncate", "short body")])
def test_persistent_failures_end_with_a_clear_error(server, obj, fault, text):
    url, data = obj
    out = np.full(data.size, 7, dtype=np.uint8)
    with gpufile.open(url) as f:
        server.faults.arm(fault)
        with pytest.raises(OSError, match=text) as e:
            f.read(out)
    assert e.value.errno == errno.EIO
    assert "4 tries" in str(e.value)  # the first try and remote_retries=3 more


@needs_gpu_driver
def test_persistent_failure_into_device_memory_leaks_no_staging(server, obj):
    url, data = obj
    buf = gpufile.DeviceBuffer(data.size)
    with gpufile.open(url) as f:
        server.faults.arm("status")
        with pytest.raises(OSError, match="HTTP 503"):
            f.read(buf)
        server.faults.arm("status", times=0)
        assert f.read(buf) == data.size  # the staging came back: the next read works
    np.testing.assert_array_equal(device_bytes(buf), data)


def test_a_stalled_server_times_out(server, obj):
    url, data = obj
    use_settings(remote_timeout_s=1)
    out = np.zeros(data.size, dtype=np.uint8)
    with gpufile.open(url) as f:
        server.faults.arm("stall", times=1, stall_seconds=4)
        with pytest.raises(TimeoutError, match="remote_timeout_s"):
            f.read(out)


def test_an_object_replaced_mid_read_is_an_error(server, obj, rng):
    url, data = obj
    with gpufile.open(url) as f:
        server.faults.arm("replace", times=1, replace_with=rng.bytes(data.size))
        with pytest.raises(OSError, match="replaced") as e:
            f.read(np.zeros(data.size, dtype=np.uint8))
    assert e.value.errno == errno.ESTALE
    assert any(r[0] == "GET" for r in server.requests)


def test_a_failed_future_says_why(server, obj):
    url, data = obj
    with gpufile.open(url) as f:
        server.faults.arm("status")
        fut = f.pread(np.zeros(PART * 2, dtype=np.uint8))
        with pytest.raises(OSError, match="HTTP 503"):
            fut.result(timeout=30)


def test_close_waits_for_futures(server, obj):
    url, data = obj
    out = np.zeros(data.size, dtype=np.uint8)
    f = gpufile.open(url)
    fut = f.pread(out)
    f.close()
    assert fut.done()  # close returned after the read and its Future
    assert fut.result() == data.size
    with pytest.raises(ValueError, match="closed"):
        f.read(out)


def test_without_libcurl_opening_a_url_says_so(server, obj, tmp_path):
    """libcurl is loaded at run time: without it a URL fails clearly and files still work."""
    url, _ = obj
    local = tmp_path / "x.bin"
    local.write_bytes(b"abc")
    code = (
        "import errno, gpufile, numpy as np\n"
        f"with gpufile.open({str(local)!r}) as f:\n"
        "    assert f.read(np.zeros(3, dtype=np.uint8)) == 3\n"
        "try:\n"
        f"    gpufile.open({url!r})\n"
        "except OSError as e:\n"
        "    assert e.errno == errno.ELIBACC, e\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('opened without libcurl')\n")
    env = dict(os.environ, GPUFILE_CURL_LIBRARY=str(tmp_path / "no-libcurl.so.4"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "remote objects need libcurl" in out.stdout and "libcurl4" in out.stdout


def test_https_verifies_the_server(tmp_path, rng, monkeypatch):
    """TLS: the server's certificate is checked (CURL_CA_BUNDLE names one outside the system's
    store, as for the curl tool)."""
    use_settings()
    data = rng.bytes(3 * PART + 1)
    with RangeServer(tls_dir=tmp_path) as s:
        s.put("/x", data)
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
        with pytest.raises(OSError, match="(?i)certificate") as e:
            gpufile.open(s.base + "/x")
        assert e.value.errno == errno.EIO
        monkeypatch.setenv("CURL_CA_BUNDLE", s.ca_file)
        with gpufile.open(s.base + "/x") as f:
            out = np.zeros(len(data), dtype=np.uint8)
            assert f.read(out) == len(data) and out.tobytes() == data
    gpufile.driver_close()


def test_many_futures_share_a_bounded_number_of_threads():
    """64 Futures held in flight at once run on the remote pool: remote_concurrency /
    remote_transfers_per_thread threads (8 / 2 = 4 here), not a thread (or several) per Future."""
    child = os.path.join(os.path.dirname(__file__), "remote_threads_child.py")
    out = subprocess.run([sys.executable, child, "64", "8"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert 1 <= counts["pool"] <= 4, counts
    # Threads of the process that are not Python's: the pool's, give or take a server handler
    # thread between its start and Python's knowing of it.
    assert counts["native"] <= 4 + 2, counts
    assert counts["held"] >= 4  # reads really were in flight while the threads were counted


def test_a_failing_part_fails_its_future_with_the_first_cause(server, obj):
    """A read of several lanes whose parts fail for good after the first ten: the Future fails
    with a part's own failure, not with the other lanes' stopping."""
    url, data = obj
    out = np.zeros(data.size, dtype=np.uint8)
    with gpufile.open(url) as f:
        server.faults.arm("status", after=10)
        fut = f.pread(out)
        with pytest.raises(OSError, match="HTTP 503.*4 tries") as e:
            fut.result(timeout=120)
        assert e.value.errno == errno.EIO
        assert "another part" not in str(e.value)


def test_a_whole_object_in_one_get_without_head(server, obj):
    url, data = obj
    assert gpufile._gpufile._remote_get(url) == data.tobytes()
    assert [r[0] for r in server.requests] == ["GET"]  # no HEAD before it
    assert "Range" not in server.requests[0][2]


def test_whole_object_get_errors(server, obj):
    url, data = obj
    with pytest.raises(FileNotFoundError, match="missing"):
        gpufile._gpufile._remote_get(server.base + "/missing")
    server.faults.arm("status", times=2)  # retried as parts are
    assert gpufile._gpufile._remote_get(url) == data.tobytes()
    assert server.faults.fired["status"] == 2
    server.faults.arm("status")  # for ever
    with pytest.raises(OSError, match="HTTP 503.*4 tries") as e:
        gpufile._gpufile._remote_get(url)
    assert e.value.errno == errno.EIO
    server.faults.arm("status", times=0)
    with pytest.raises(OSError, match="larger than") as e:
        gpufile._gpufile._remote_get(url, max_bytes=data.size - 1)
    assert e.value.errno == errno.EFBIG
    assert gpufile._gpufile._remote_get(url, max_bytes=data.size) == data.tobytes()
