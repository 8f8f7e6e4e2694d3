"""s3:// objects against a real S3 server: versitygw (its POSIX backend on a temporary
directory, 127.0.0.1 only), started and stopped here. scripts/test.sh builds it
(scripts/deps.sh: gpufile_install_versitygw) and passes its path in GPUFILE_VERSITYGW; without
that variable, versitygw on PATH is used. Where there is neither (a GPU machine, say), or
GPUFILE_TEST_NO_S3=1, these tests skip and say why; GPUFILE_REQUIRE_S3=1 (set by CI and by
scripts/test.sh once it built the server) turns that skip into a failure.

The credential sources (environment, shared credentials file, config file, session token,
endpoint variables) are checked both against versitygw, which verifies the signatures, and
against tests/support/range_server.py, which shows what was sent."""
import errno
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gpufile
from conftest import device_bytes, needs_gpu_driver

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from range_server import RangeServer  # noqa: E402
from test_remote import PART, use_settings  # noqa: E402

ACCESS, SECRET = "gpufiletestkey", "gpufiletestsecret1234"
AWS_VARS = ["AWS_CA_BUNDLE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
            "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
            "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def versitygw_binary() -> str:
    """The S3 server's path: GPUFILE_VERSITYGW, else versitygw on PATH. Without one the tests skip,
    saying why, unless GPUFILE_REQUIRE_S3=1 asks that they run (CI: a skip there would hide them)."""
    named = os.environ.get("GPUFILE_VERSITYGW")
    if os.environ.get("GPUFILE_TEST_NO_S3") == "1":
        why = "GPUFILE_TEST_NO_S3=1: no S3 server on purpose"
    elif named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            pytest.fail(f"GPUFILE_VERSITYGW={named} is not an executable file")
        return named
    else:
        found = shutil.which("versitygw")
        if found:
            return found
        why = ("no S3 server here: GPUFILE_VERSITYGW is unset and no versitygw is on PATH "
               "(scripts/test.sh builds it: scripts/deps.sh, gpufile_install_versitygw)")
    if os.environ.get("GPUFILE_REQUIRE_S3") == "1":
        pytest.fail(f"GPUFILE_REQUIRE_S3=1, but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def versitygw(tmp_path_factory):
    """(endpoint URL, the backend directory: buckets are its subdirectories, objects files)."""
    binary = versitygw_binary()
    root = tmp_path_factory.mktemp("s3")
    port = free_port()
    log = open(root.parent / "versitygw.log", "wb")
    proc = subprocess.Popen([binary, "--port", f"127.0.0.1:{port}", "--access", ACCESS,
                             "--secret", SECRET, "--region", "us-east-1", "--quiet",
                             "posix", str(root)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"versitygw did not start: {root.parent / 'versitygw.log'}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", root
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """A clean AWS environment: no variable set, HOME without ~/.aws."""
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    use_settings()
    yield monkeypatch
    gpufile.driver_close()


@pytest.fixture
def bucket(versitygw, rng):
    """An object of 2 MiB + 77 bytes in bucket "data": (endpoint, its bytes)."""
    endpoint, root = versitygw
    (root / "data").mkdir(exist_ok=True)
    data = rng.integers(0, 256, size=(2 << 20) + 77, dtype=np.uint8)
    (root / "data" / "dir").mkdir(exist_ok=True)
    data.tofile(root / "data" / "dir" / "obj.bin")
    return endpoint, data


def read_all(url, nbytes):
    out = np.zeros(nbytes, dtype=np.uint8)
    with gpufile.open(url) as f:
        assert f.size() == nbytes
        assert f.read(out) == nbytes
    return out


def test_environment_credentials(aws_env, bucket):
    endpoint, data = bucket
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    np.testing.assert_array_equal(read_all("s3://data/dir/obj.bin", data.size), data)


@needs_gpu_driver
def test_into_device_memory(aws_env, bucket):
    endpoint, data = bucket
    aws_env.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    buf = gpufile.DeviceBuffer(data.size)
    with gpufile.open("s3://data/dir/obj.bin") as f:
        fut = f.pread(buf)
        assert fut.result(timeout=60) == data.size
    np.testing.assert_array_equal(device_bytes(buf), data)


def test_shared_credentials_file_profile(aws_env, bucket, tmp_path):
    endpoint, data = bucket
    creds = tmp_path / "creds"
    creds.write_text(f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                     f"# the one used\n[gpu]\naws_access_key_id = {ACCESS}\n"
                     f"aws_secret_access_key = {SECRET}\n")
    aws_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    aws_env.setenv("AWS_PROFILE", "gpu")
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    np.testing.assert_array_equal(read_all("s3://data/dir/obj.bin", data.size), data)


def test_home_aws_files_and_config_profile(aws_env, bucket, tmp_path):
    endpoint, data = bucket
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "config").write_text(
        f"[profile cfg]\nregion = us-east-1\nendpoint_url = {endpoint}\n"
        f"aws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n")
    aws_env.setenv("AWS_PROFILE", "cfg")
    np.testing.assert_array_equal(read_all("s3://data/dir/obj.bin", data.size), data)


def test_wrong_secret_is_permission_error(aws_env, bucket):
    endpoint, _ = bucket
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(PermissionError):
        gpufile.open("s3://data/dir/obj.bin")


@pytest.mark.parametrize("url", ["s3://data/dir/missing.bin", "s3://nobucket/dir/obj.bin"])
def test_missing_object_or_bucket_is_file_not_found(aws_env, bucket, url):
    endpoint, _ = bucket
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with pytest.raises(FileNotFoundError) as e:
        gpufile.open(url)
    assert e.value.errno == errno.ENOENT and e.value.filename == url


def test_a_bucket_alone_is_no_object(aws_env):
    with pytest.raises(OSError, match="names a bucket"):
        gpufile.open("s3://data")


def test_what_is_sent_session_token_region_and_endpoint_precedence(aws_env, rng):
    with RangeServer() as s, RangeServer() as decoy:
        data = rng.bytes(3 * PART)
        s.put("/bkt/a%20key", data)
        aws_env.setenv("AWS_ENDPOINT_URL", decoy.base)  # AWS_ENDPOINT_URL_S3 wins
        aws_env.setenv("AWS_ENDPOINT_URL_S3", s.base)
        aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        aws_env.setenv("AWS_SECRET_ACCESS_KEY", "secret")
        aws_env.setenv("AWS_SESSION_TOKEN", "the-token")
        aws_env.setenv("AWS_DEFAULT_REGION", "eu-west-3")
        out = read_all("s3://bkt/a key", len(data))
        assert out.tobytes() == data
        assert not decoy.requests
        assert len(s.requests) == 1 + 3  # HEAD and one GET per part, path-style
        for _, path, headers in s.requests:
            assert path == "/bkt/a%20key"
            assert headers["x-amz-security-token"] == "the-token"
            auth = headers["Authorization"]
            assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            assert "/eu-west-3/s3/aws4_request" in auth
            assert "x-amz-security-token" in auth  # signed too


def test_no_credentials_sends_unsigned_requests(aws_env, rng):
    with RangeServer() as s:
        s.put("/pub/x", rng.bytes(100))
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        read_all("s3://pub/x", 100)
        assert all("Authorization" not in h for _, _, h in s.requests)


def test_https_endpoint_with_aws_ca_bundle(aws_env, rng, tmp_path):
    with RangeServer(tls_dir=tmp_path) as s:
        data = rng.bytes(2 * PART)
        s.put("/bkt/k", data)
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        aws_env.setenv("AWS_CA_BUNDLE", s.ca_file)
        assert read_all("s3://bkt/k", len(data)).tobytes() == data


# ---- writes: multipart upload ----

@pytest.fixture
def s3_env(aws_env, bucket):
    endpoint, _ = bucket
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    return aws_env


def test_write_from_host_memory_then_read_back(s3_env, rng):
    data = rng.integers(0, 256, size=(11 << 20) + 3, dtype=np.uint8)  # three parts of 5 MiB
    with gpufile.open("s3://data/up/host.bin", "w") as w:
        assert isinstance(w, gpufile.RemoteWriter)
        assert w.write(data[:1000]) == 1000  # pieces of any size, appended
        assert w.write(data, buf_offset=1000) == data.size - 1000
        assert w.tell() == data.size
        with pytest.raises(FileNotFoundError):
            gpufile.open("s3://data/up/host.bin")  # not there before the close
    np.testing.assert_array_equal(read_all("s3://data/up/host.bin", data.size), data)


NO_GPU_CHILD = """
import sys
import numpy as np
import gpufile
assert not gpufile.cuda_available()
data = np.random.default_rng(5).integers(0, 256, size=(11 << 20) + 3, dtype=np.uint8)
with gpufile.open(sys.argv[1], "w") as w:  # three parts of 5 MiB, in plain host memory
    assert w.write(data) == data.size
out = np.zeros(data.size, dtype=np.uint8)
with gpufile.open(sys.argv[1]) as f:
    assert f.read(out) == data.size
assert np.array_equal(out, data)
print("ok")
"""


def test_write_and_read_back_on_a_machine_without_a_gpu(s3_env, tmp_path):
    """Without a CUDA driver (a CPU-only machine), S3 writes and reads of host memory work: the
    writer's parts are plain memory there. They failed with "0 MiB each" before: the session
    made its upload buffers only where it found a GPU."""
    env = dict(os.environ, GPUFILE_CUDA_LIBRARY=str(tmp_path / "no-libcuda.so.1"))
    out = subprocess.run([sys.executable, "-c", NO_GPU_CHILD, "s3://data/up/no-gpu.bin"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_writes_count_under_the_remote_path(s3_env, rng):
    # Each write call: a call and its bytes (level 1), the "remote" path's bytes (always), its
    # latency (level 2, a part upload it set off included) and its device row (level 3).
    data = rng.integers(0, 256, size=6 << 20, dtype=np.uint8)  # a part of 5 MiB goes mid-write
    gpufile.driver_close()
    gpufile.set_setting("profile.cufile_stats", 3)
    try:
        with gpufile.open("s3://data/up/counted.bin", "w") as w:
            gpufile.stats_reset()
            assert w.write(data[:4096]) == 4096
            assert w.write(data, buf_offset=4096) == data.size - 4096
            st = gpufile.stats()
    finally:
        gpufile.driver_close()  # the next test opens with defaults (stats off) again
    remote = st["write"]["paths"]["remote"]
    assert remote["bytes"] == data.size and remote["ops"] == 2, remote
    assert st["write"]["calls_ok"] == 2 and st["write"]["bytes"] == data.size
    assert sum(remote["latency"]["buckets"]) == 2, remote["latency"]
    assert st["devices"]["host"]["write"] == {"calls_ok": 2, "calls_failed": 0,
                                              "bytes": data.size}


def test_write_from_a_thread_without_a_cuda_context(s3_env, rng):
    # zarr's store writes from asyncio's worker threads, where no CUDA context is current: the
    # writer makes one current to pin its part buffer (the driver refuses otherwise).
    data = rng.integers(0, 256, size=1000, dtype=np.uint8)
    failures = []

    def write():
        try:
            with gpufile.open("s3://data/up/thread.bin", "w") as w:
                w.write(data)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    t = threading.Thread(target=write)
    t.start()
    t.join(60)
    assert not failures
    np.testing.assert_array_equal(read_all("s3://data/up/thread.bin", data.size), data)


@needs_gpu_driver
def test_write_from_device_memory(s3_env, rng):
    data = rng.integers(0, 256, size=(6 << 20) + 5, dtype=np.uint8)
    buf = gpufile.DeviceBuffer(data.size)
    buf.copy_from_host(data)
    with gpufile.open("s3://data/up/dev.bin", "w") as w:
        assert w.write(buf) == data.size
    np.testing.assert_array_equal(read_all("s3://data/up/dev.bin", data.size), data)


def test_an_exception_in_the_block_aborts_the_upload(s3_env, rng):
    with pytest.raises(KeyError):
        with gpufile.open("s3://data/up/aborted.bin", "w") as w:
            w.write(rng.integers(0, 256, size=6 << 20, dtype=np.uint8))  # a part went out
            raise KeyError("stop")
    with pytest.raises(FileNotFoundError):
        gpufile.open("s3://data/up/aborted.bin")
    with pytest.raises(OSError, match="the upload is over"):
        w.write(np.zeros(4, dtype=np.uint8))


def test_an_empty_object(s3_env):
    with gpufile.open("s3://data/up/empty", "w"):
        pass
    with gpufile.open("s3://data/up/empty") as f:
        assert f.size() == 0
        assert f.read(np.zeros(4, dtype=np.uint8)) == 0


def test_write_errors(s3_env, aws_env):
    # The open sends nothing: the first request fails, the PUT of a small object at close...
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        with gpufile.open("s3://nobucket/x", "w") as w:
            w.write(np.zeros(10, dtype=np.uint8))
    # ... or the start of the multipart upload of a larger one, when its first part goes out
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        with gpufile.open("s3://nobucket/x", "w") as w:
            w.write(np.zeros((5 << 20) + 1, dtype=np.uint8))
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(PermissionError):
        with gpufile.open("s3://data/x", "w"):
            pass
    with pytest.raises(ValueError, match="read-only"):
        gpufile.open("http://127.0.0.1:1/x", "w")


def test_write_retries_a_few_failed_parts_and_aborts_after_many(aws_env, rng):
    use_settings(remote_retries=3)
    with RangeServer() as s:
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        data = rng.bytes((5 << 20) + 100)
        s.faults.arm("status", times=2)  # the first part is refused twice, then taken
        with gpufile.open("s3://b/ok", "w") as w:
            w.write(np.frombuffer(data, dtype=np.uint8))
        assert s.faults.fired["status"] == 2
        assert s.objects["/b/ok"][0] == data

        s.faults.arm("status")  # for ever
        w = gpufile.open("s3://b/never", "w")
        with pytest.raises(OSError, match="HTTP 503.*4 tries"):
            w.write(np.frombuffer(data, dtype=np.uint8))  # the first part goes out meanwhile
            w.close()  # and its failure shows here at the latest
        assert "/b/never" not in s.objects
        assert not s.uploads  # aborted: the server dropped the parts
        assert any(r[0] == "DELETE" for r in s.requests)


UPLOAD_PART = 5 << 20  # S3's smallest part, above the tests' remote_part_kb


@pytest.mark.parametrize("size", [0, 1, UPLOAD_PART - 1, UPLOAD_PART, UPLOAD_PART + 1,
                                  3 * UPLOAD_PART + 7])
def test_sizes_around_the_part_size_round_trip(s3_env, rng, size):
    data = rng.integers(0, 256, size=size, dtype=np.uint8)
    with gpufile.open(f"s3://data/up/size-{size}", "w") as w:
        for piece in np.array_split(data, 3):  # pieces that cross the part boundaries
            assert w.write(piece) == piece.size
        assert w.tell() == size
    np.testing.assert_array_equal(read_all(f"s3://data/up/size-{size}", size), data)


def test_pwrite_futures_append_in_the_order_made(s3_env, rng):
    """pwrite, File's shape: Futures done once their bytes are taken, appended in the order
    made, mixed with write; file_offset, when given, must be where the write lands."""
    data = rng.integers(0, 256, size=2 * UPLOAD_PART + 999, dtype=np.uint8)
    pieces = np.array_split(data, 7)
    with gpufile.open("s3://data/up/pwrite.bin", "w") as w:
        futures, at = [], 0
        for i, piece in enumerate(pieces):
            if i == 3:
                assert w.write(piece) == piece.size  # after the Futures before it
            elif i == 4:
                futures.append((w.pwrite(piece, file_offset=at), piece.size))
            else:
                futures.append((w.pwrite(piece), piece.size))
            at += piece.size
        with pytest.raises(ValueError, match=f"lands at {at}, not at file_offset 0"):
            w.pwrite(pieces[0], file_offset=0)
        assert [f.result(timeout=60) for f, _ in futures] == [n for _, n in futures]
        assert w.tell() == data.size
    np.testing.assert_array_equal(read_all("s3://data/up/pwrite.bin", data.size), data)


def test_a_pwrite_buffer_is_free_once_its_future_is_done(s3_env, rng):
    data = rng.integers(0, 256, size=UPLOAD_PART + 10, dtype=np.uint8)
    buf = data.copy()
    with gpufile.open("s3://data/up/taken.bin", "w") as w:
        assert w.pwrite(buf).result(timeout=60) == buf.size
        buf[:] = 0  # the object keeps what was there when the write was made
    np.testing.assert_array_equal(read_all("s3://data/up/taken.bin", data.size), data)


@needs_gpu_driver
def test_pwrite_from_device_memory(s3_env, rng):
    data = rng.integers(0, 256, size=UPLOAD_PART + 3, dtype=np.uint8)
    buf = gpufile.DeviceBuffer(data.size)
    buf.copy_from_host(data)
    with gpufile.open("s3://data/up/pdev.bin", "w") as w:
        half = data.size // 2
        first = w.pwrite_ptr(buf.ptr, half)
        second = w.pwrite(buf, size=data.size - half, buf_offset=half, file_offset=half)
        assert (first.result(timeout=60), second.result(timeout=60)) == (half, data.size - half)
    np.testing.assert_array_equal(read_all("s3://data/up/pdev.bin", data.size), data)


def test_abort_cancels_the_pwrites_not_started(s3_env, rng):
    piece = rng.integers(0, 256, size=UPLOAD_PART, dtype=np.uint8)
    w = gpufile.open("s3://data/up/cancelled.bin", "w")
    futures = [w.pwrite(piece) for _ in range(8)]
    w.abort()
    cancelled = False  # from the first cancelled write on, every later one is too
    for f in futures:
        assert f.done()  # abort waited for the write running
        try:
            assert f.result() == piece.size
            assert not cancelled, "a write ran after one made before it was cancelled"
        except OSError as e:
            assert e.errno == errno.ECANCELED, e
            cancelled = True
    with pytest.raises(FileNotFoundError):
        gpufile.open("s3://data/up/cancelled.bin")
    with pytest.raises(OSError, match="the upload is over") as e:
        w.pwrite(piece)
    assert e.value.errno == errno.EBADF
    with pytest.raises(OSError) as e:
        w.close()  # after abort() there is nothing to complete
    assert e.value.errno == errno.EBADF


def test_a_failed_pwrite_fails_its_future_and_the_close(s3_env):
    w = gpufile.open("s3://nobucket/up/x", "w")
    f = w.pwrite(np.zeros(UPLOAD_PART + 1, dtype=np.uint8))  # its first part goes out
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        f.result(timeout=60)
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        w.close()  # the failure again
    # Leaving a with block normally is no sign of success when a write in it failed: a pwrite
    # whose Future nobody asked, or a write whose exception was caught.
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        with gpufile.open("s3://nobucket/up/y", "w") as w:
            w.pwrite(np.zeros(UPLOAD_PART + 1, dtype=np.uint8))
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        with gpufile.open("s3://nobucket/up/z", "w") as w:
            try:
                w.write(np.zeros(UPLOAD_PART + 1, dtype=np.uint8))
            except FileNotFoundError:
                pass
    with gpufile.open("s3://data/up/aborted-in-block", "w") as w:  # abort() in the block: no error
        w.write(np.zeros(10, dtype=np.uint8))
        w.abort()
    with pytest.raises(FileNotFoundError):
        gpufile.open("s3://data/up/aborted-in-block")


@pytest.mark.parametrize("size, requests", [
    (0, ["PUT"]), (UPLOAD_PART - 1, ["PUT"]), (UPLOAD_PART, ["PUT"]),
    (UPLOAD_PART + 1, ["POST", "PUT", "PUT", "POST"])])
def test_an_object_of_one_part_is_one_put(aws_env, rng, size, requests):
    with RangeServer() as s:
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        data = rng.bytes(size)
        with gpufile.open("s3://b/k", "w") as w:
            w.write(np.frombuffer(data, dtype=np.uint8))
        assert s.objects["/b/k"][0] == data
        assert sorted(r[0] for r in s.requests) == sorted(requests)
        if requests == ["PUT"]:
            assert s.requests[0][1] == "/b/k"  # PutObject: no query


def test_several_parts_are_in_flight_together(aws_env, rng):
    """The server holds every PUT at its gate: a writer of four parts has two (remote_concurrency
    8 / 4) in flight at once, then the object is complete and byte-exact."""
    with RangeServer() as s:
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        data = rng.bytes(3 * UPLOAD_PART + 1)
        s.gate.clear()
        failures = []

        def write():
            try:
                with gpufile.open("s3://b/big", "w") as w:
                    w.write(np.frombuffer(data, dtype=np.uint8))
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)

        t = threading.Thread(target=write)
        t.start()
        deadline = time.monotonic() + 120
        while sum(r[0] == "PUT" for r in s.requests) < 2:
            assert time.monotonic() < deadline and t.is_alive(), failures
            time.sleep(0.01)
        held = sum(r[0] == "PUT" for r in s.requests)
        s.gate.set()
        t.join(300)
        assert not failures
        assert held == 2  # two parts waiting at the gate together, not one, and no third
        assert s.objects["/b/big"][0] == data
        assert sum(r[0] == "PUT" for r in s.requests) == 4


# ---- close_async ----

def test_close_async_gives_the_size_of_the_object_it_made(s3_env, rng):
    data = rng.integers(0, 256, size=2 * UPLOAD_PART + 77, dtype=np.uint8)
    w = gpufile.open("s3://data/up/closed-async.bin", "w")
    writes = [w.pwrite(piece) for piece in np.array_split(data, 3)]
    closing = w.close_async()
    assert w.closed  # from the call on: later writes are refused at once
    with pytest.raises(OSError) as e:
        w.write(data[:1])
    assert e.value.errno == errno.EBADF
    with pytest.raises(OSError, match="the upload is over"):
        w.pwrite(data[:1])
    assert closing.result(timeout=60) == data.size
    assert all(f.done() for f in writes)  # they ran before the close
    assert w.tell() == data.size
    assert w.close_async().result(timeout=60) == data.size  # again: the same result
    w.close()  # nothing more to do
    w.abort()  # nor here: the object stays
    np.testing.assert_array_equal(read_all("s3://data/up/closed-async.bin", data.size), data)


def test_close_async_failure_surfaces_in_its_future(s3_env):
    w = gpufile.open("s3://nobucket/up/x", "w")
    w.pwrite(np.zeros(UPLOAD_PART + 1, dtype=np.uint8))  # its first part fails
    closing = w.close_async()
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        closing.result(timeout=60)
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        w.close()  # the same failure
    w = gpufile.open("s3://nobucket/up/y", "w")
    w.write(np.zeros(10, dtype=np.uint8))  # one part: the PUT at the close fails
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        w.close_async().result(timeout=60)
    w = gpufile.open("s3://data/up/aborted-then-closed", "w")
    w.write(np.zeros(10, dtype=np.uint8))
    w.abort()
    with pytest.raises(OSError) as e:
        w.close_async().result(timeout=60)
    assert e.value.errno == errno.EBADF


def test_abort_waits_for_a_close_async_held_at_the_server(aws_env, rng):
    """The server holds the close's PUT at its gate: the Future is not done and abort() does
    not return until the gate opens; then the object is there, whole."""
    with RangeServer() as s:
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        data = rng.bytes(1000)
        w = gpufile.open("s3://b/held", "w")
        w.write(np.frombuffer(data, dtype=np.uint8))
        s.gate.clear()
        closing = w.close_async()
        aborted = threading.Event()
        t = threading.Thread(target=lambda: (w.abort(), aborted.set()))
        t.start()
        time.sleep(0.3)
        assert not closing.done() and not aborted.is_set()
        s.gate.set()
        t.join(60)
        assert aborted.is_set()
        assert closing.result(timeout=60) == len(data)
        assert s.objects["/b/held"][0] == data
