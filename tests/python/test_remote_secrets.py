"""Credentials stay out of every output (docs/remote.md, "Security").

Every failure of a remote open, read and write runs with secrets in the URL (a presigned query,
a userinfo password) and in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN); the exception's str, repr, args and filename, the log at TRACE and the
statistics are searched for them. Then where redirects may go and what they carry, and the
certificate variables of TLS. The server is tests/support/range_server.py (127.0.0.1 only)."""
import errno
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from gpufile.safetensors import SafetensorError, load_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from range_server import RangeServer  # noqa: E402
from test_remote import PART, use_settings  # noqa: E402
from test_remote_s3 import AWS_VARS  # noqa: E402

SECRETS = {
    "userinfo password": "pw-S3CR3T-userinfo",
    "X-Amz-Signature": "f00dS3CR3Tsignature",
    "X-Amz-Credential": "AKIAS3CR3TCREDENTIAL",
    "X-Amz-Security-Token": "FwoS3CR3Tsessiontoken",
    "Azure sig": "azS3CR3Tsig",
    "AWS_ACCESS_KEY_ID": "AKIAS3CR3TENVKEYID",
    "AWS_SECRET_ACCESS_KEY": "wJalrS3CR3TENVsecretkey",
    "AWS_SESSION_TOKEN": "IQoS3CR3TENVsessiontoken",
}
ENV_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# What the URL with secrets shows instead (the query's harmless parameters stay).
SHOWN = ("?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED"
         "&X-Amz-Security-Token=REDACTED&sig=REDACTED")


def presigned(base: str, path: str) -> str:
    """`base` + `path` as a presigned URL with a password in its userinfo."""
    scheme, _, host = base.partition("://")
    return (f"{scheme}://alice:{SECRETS['userinfo password']}@{host}{path}"
            "?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential={SECRETS['X-Amz-Credential']}%2F20261127%2Fus-east-1%2Fs3%2Faws4_request"
            f"&X-Amz-Signature={SECRETS['X-Amz-Signature']}"
            f"&X-Amz-Security-Token={SECRETS['X-Amz-Security-Token']}&sig={SECRETS['Azure sig']}")


def assert_hidden(*texts: str):
    for text in texts:
        for what, secret in SECRETS.items():
            assert secret not in text, f"the {what} shows in {text!r}"


@pytest.fixture
def secret_env(monkeypatch, tmp_path):
    """AWS credentials in the environment, the log at TRACE into a file (yielded); at the end the
    log and the statistics are searched too."""
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    for var in ENV_SECRETS:
        monkeypatch.setenv(var, SECRETS[var])
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    log = tmp_path / "gpufile.log"
    monkeypatch.setenv("GPUFILE_LOG_LEVEL", "TRACE")
    monkeypatch.setenv("GPUFILE_LOG_FILE", str(log))
    use_settings(remote_retries=2, remote_timeout_s=1)
    yield log
    assert_hidden(json.dumps(gpufile.stats()))
    gpufile.driver_close()
    assert_hidden(log.read_text() if log.exists() else "")


@pytest.fixture
def server(secret_env, rng):
    with RangeServer() as s:
        s.put("/data.bin", rng.bytes(4 * PART + 5))
        yield s


def raised(call, kind=OSError):
    """The exception `call` raises, its every rendering searched for the secrets."""
    with pytest.raises(kind) as info:
        call()
    e = info.value
    assert_hidden(str(e), repr(e), repr(e.args), str(getattr(e, "filename", "")))
    return e


def read_all(url):
    with gpufile.open(url) as f:
        f.read(np.zeros(f.size(), dtype=np.uint8))


def pread_all(url):
    with gpufile.open(url) as f:
        f.pread(np.zeros(f.size(), dtype=np.uint8), size=f.size()).result()


def test_open_of_a_missing_object(server, secret_env):
    e = raised(lambda: gpufile.open(presigned(server.base, "/missing")), FileNotFoundError)
    assert e.errno == errno.ENOENT
    shown = "http://alice:REDACTED@127.0.0.1:%d/missing%s" % (server.server_address[1], SHOWN)
    assert shown in str(e) and e.filename == shown  # where it failed, still said
    assert f"remote open failed: {shown}" in secret_env.read_text()  # logged, and redacted there too


def test_open_refused(server):
    server.require_header = "X-Never-Sent"
    e = raised(lambda: gpufile.open(presigned(server.base, "/data.bin")), PermissionError)
    assert "REDACTED" in str(e)


@pytest.mark.parametrize("read", [read_all, pread_all])
@pytest.mark.parametrize("fault, arm, kind, err", [
    ("5xx until the retries ran out", dict(kind="status", status=503), OSError, errno.EIO),
    ("403 on a part", dict(kind="status", status=403), PermissionError, errno.EACCES),
    ("404 on a part", dict(kind="status", status=404), FileNotFoundError, errno.ENOENT),
    ("a stalled server", dict(kind="stall", stall_seconds=3), TimeoutError, errno.ETIMEDOUT),
    ("a short body", dict(kind="truncate"), OSError, errno.EIO),
    ("the ETag changed", dict(kind="replace", replace_with=b"new bytes" * PART), OSError, errno.ESTALE),
])
def test_read_failures(server, read, fault, arm, kind, err):
    arm = dict(arm)  # the table's own stays whole for the next run
    server.faults.arm(arm.pop("kind"), after=1, **arm)
    e = raised(lambda: read(presigned(server.base, "/data.bin")), kind)
    assert e.errno == err, fault
    assert SHOWN in str(e), str(e)


def test_whole_object_get_and_safetensors(server):
    """The whole-object GET (gpufile.zarr's chunks) and a loader's own messages."""
    e = raised(lambda: gpufile._gpufile._remote_get(presigned(server.base, "/missing")), FileNotFoundError)
    assert SHOWN in str(e)
    raised(lambda: load_file(presigned(server.base, "/missing.safetensors"), framework="numpy"),
           FileNotFoundError)
    server.put("/short.safetensors", (1000).to_bytes(8, "little") + b"{}")
    raised(lambda: load_file(presigned(server.base, "/short.safetensors"), framework="numpy"),
           SafetensorError)
    url = presigned(server.base, "/x")
    assert gpufile._gpufile._redact_url(url) == url.replace(SECRETS["userinfo password"], "REDACTED").split("?")[0] + SHOWN
    e = raised(lambda: gpufile.open(url, "w"), ValueError)
    assert "REDACTED" in str(e)


def test_zarr_store_messages(server):
    pytest.importorskip("zarr", minversion="3")
    from gpufile.zarr import GpufileStore
    e = raised(lambda: GpufileStore(presigned(server.base, "/store")), ValueError)
    assert SHOWN in str(e)


@pytest.fixture
def s3(server, monkeypatch):
    """s3:// URLs served by `server`, signed with the environment's credentials."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.base)
    return server


def write_object(url, nbytes):
    with gpufile.open(url, "w") as w:
        w.write(np.ones(nbytes, dtype=np.uint8))


@pytest.mark.parametrize("status, kind, err", [
    (503, OSError, errno.EIO), (403, PermissionError, errno.EACCES), (404, FileNotFoundError, errno.ENOENT)])
@pytest.mark.parametrize("parts", [1, 3])  # one PUT at close, or a multipart upload
def test_write_failures(s3, status, kind, err, parts):
    s3.faults.arm("status", status=status)
    e = raised(lambda: write_object("s3://bucket/out.bin", parts * PART), kind)
    assert e.errno == err
    signed = [h for _, _, h in s3.requests if "Authorization" in h]
    assert signed and SECRETS["AWS_ACCESS_KEY_ID"] in signed[0]["Authorization"]  # the secrets were used


def test_s3_read_failures(s3):
    e = raised(lambda: gpufile.open("s3://bucket/missing"), FileNotFoundError)
    assert "s3://bucket/missing" in str(e)
    s3.put("/bucket/data.bin", b"x" * (3 * PART))
    s3.faults.arm("status", after=1, status=500)
    raised(lambda: read_all("s3://bucket/data.bin"))
    sent = {k.lower(): v for k, v in s3.requests[-1][2].items()}
    assert sent["x-amz-security-token"] == SECRETS["AWS_SESSION_TOKEN"]  # the token was in play


# ---- redirects ------------------------------------------------------------------------------------

def test_redirect_to_another_host_carries_no_credentials(server, rng):
    """A 302 to another server is followed, without the userinfo's Basic credentials and without
    the first URL's query."""
    with RangeServer() as other:
        data = rng.bytes(2 * PART + 1)
        other.put("/moved.bin", data)
        server.redirects["/data.bin"] = other.base + "/moved.bin"
        with gpufile.open(presigned(server.base, "/data.bin")) as f:
            out = np.zeros(f.size(), dtype=np.uint8)
            assert f.read(out) == len(data) and out.tobytes() == data
        assert "Authorization" in server.requests[0][2]  # Basic, to the host asked
        assert other.requests and all("Authorization" not in h for _, _, h in other.requests)
        assert all("?" not in path for _, path, _ in other.requests)


@pytest.mark.parametrize("target", ["ftp://127.0.0.1:1/x", "file:///etc/hostname"])
def test_redirect_to_another_scheme_is_refused(server, target):
    server.redirects["/data.bin"] = target + "?X-Amz-Signature=" + SECRETS["X-Amz-Signature"]
    e = raised(lambda: gpufile.open(presigned(server.base, "/data.bin")))
    assert f"refused a redirect to {target}" in str(e), str(e)


def test_redirect_from_https_to_http_is_refused(secret_env, tmp_path, monkeypatch, rng):
    with RangeServer(tls_dir=tmp_path) as tls, RangeServer() as plain:
        monkeypatch.setenv("CURL_CA_BUNDLE", tls.ca_file)
        plain.put("/x", rng.bytes(100))
        tls.put("/x", rng.bytes(100))
        tls.redirects["/down"] = plain.base + "/x?sig=" + SECRETS["Azure sig"]
        tls.redirects["/up"] = tls.base + "/x"  # https to https is followed
        with gpufile.open(presigned(tls.base, "/up")) as f:
            assert f.size() == 100
        e = raised(lambda: gpufile.open(presigned(tls.base, "/down")))
        assert f"refused a redirect to {plain.base}/x?sig=REDACTED" in str(e), str(e)
        assert not plain.requests  # nothing went out in clear text


# ---- TLS -----------------------------------------------------------------------------------------

def trust(monkeypatch, variable, ca_file, tmp_path):
    """Makes `variable` name the server's certificate, as OpenSSL and curl read it."""
    if variable != "SSL_CERT_DIR":
        monkeypatch.setenv(variable, ca_file)
        return
    folder = tmp_path / "certs"
    folder.mkdir()
    hashed = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", ca_file],
                            check=True, capture_output=True, text=True).stdout.strip()
    shutil.copy(ca_file, folder / f"{hashed}.0")
    monkeypatch.setenv(variable, str(folder))


@pytest.mark.parametrize("variable", ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE"])
def test_tls_needs_the_servers_certificate(secret_env, tmp_path, monkeypatch, rng, variable):
    """Refused without its certificate, served with it from any of the variables (AWS_CA_BUNDLE
    for s3:// only); verification cannot be turned off."""
    for var in ("CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    data = rng.bytes(PART + 7)
    with RangeServer(tls_dir=tmp_path) as s:
        s.put("/bucket/x", data)
        s3 = variable == "AWS_CA_BUNDLE"
        if s3:
            monkeypatch.setenv("AWS_ENDPOINT_URL", s.base)
        url = "s3://bucket/x" if s3 else presigned(s.base, "/bucket/x")
        e = raised(lambda: gpufile.open(url))
        assert e.errno == errno.EIO and "certificate" in str(e).lower(), str(e)
        trust(monkeypatch, variable, s.ca_file, tmp_path)
        with gpufile.open(url) as f:
            out = np.zeros(len(data), dtype=np.uint8)
            assert f.read(out) == len(data) and out.tobytes() == data
