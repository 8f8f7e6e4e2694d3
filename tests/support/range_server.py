"""An HTTP/1.1 server with Range support and fault modes, for the remote-object tests.

Listens on 127.0.0.1 only, on a port the kernel picks; started and stopped by the tests
(tests/python/test_remote.py). Objects live in memory; each has an ETag that changes when it is
replaced. Requests with If-Match for another ETag get 412, as S3 answers.

Options: `require_header` (403 without it), `ignore_range` (a server without Range support),
`weak_etags`, `redirects` (path -> Location: HEAD and GET of that path answer 302). `gate`, an Event (set: open): while it is clear, every GET and PUT waits at the
door (after it was recorded), so that tests can hold transfers in flight.

Faults, each for the next N ranged GETs (HEAD requests are never faulted unless `head_status`):
  status      answer with that status (503 storms: status=503)
  kill        send the headers and half the body, then close the connection
  truncate    a 206 whose body (and Content-Length) is shorter than the range asked for
  stall       send the headers and a few bytes, then nothing for `stall_seconds`
  replace     after N GETs, replace the object: new bytes, new ETag
`arm(kind, times, after=K)` lets K GETs through before the fault starts.
S3's PutObject and multipart upload requests are served too (`status` faults their PUTs).
"""
from __future__ import annotations

import http.server
import re
import socket
import ssl
import subprocess
import threading
import time


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.stall_seconds = 5.0
        self.status = 503
        self.head_status: int | None = None
        self.replace_with: bytes | None = None
        self.fired: dict[str, int] = {}
        self.spared: dict[str, int] = {}  # GETs still let through before the fault starts

    def arm(self, kind: str, times: int = 1 << 30, after: int = 0, **kw):
        with self.lock:
            self.counts[kind] = times
            self.spared[kind] = after
            for k, v in kw.items():
                setattr(self, k, v)

    def take(self, kind: str) -> bool:
        with self.lock:
            left = self.counts.get(kind, 0)
            if left <= 0:
                return False
            if self.spared.get(kind, 0) > 0:
                self.spared[kind] -= 1
                return False
            self.counts[kind] = left - 1
            self.fired[kind] = self.fired.get(kind, 0) + 1
            return True


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "RangeServer"

    def log_message(self, *args):  # quiet
        pass

    def _object(self):
        return self.server.objects.get(self.path.split("?")[0])

    def _reply(self, status: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _redirected(self) -> bool:
        target = self.server.redirects.get(self.path.split("?")[0])
        if target is not None:
            self._reply(302, b"", {"Location": target})
        return target is not None

    def _check_auth(self) -> bool:
        need = self.server.require_header
        if need and need.lower() not in (k.lower() for k in self.headers.keys()):
            self._reply(403, b"<Error><Code>AccessDenied</Code></Error>")
            return False
        return True

    def do_HEAD(self):
        self.server.record(self)
        if self._redirected() or not self._check_auth():
            return
        if self.server.faults.head_status:
            return self._reply(self.server.faults.head_status)
        obj = self._object()
        if obj is None:
            return self._reply(404)
        data, etag = obj
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self):
        self.server.record(self)
        self.server.gate.wait()
        if self._redirected() or not self._check_auth():
            return
        faults = self.server.faults
        if faults.replace_with is not None and faults.take("replace"):
            self.server.put(self.path.split("?")[0], faults.replace_with)
        obj = self._object()
        if obj is None:
            return self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
        data, etag = obj
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match != etag:
            return self._reply(412, b"<Error><Code>PreconditionFailed</Code></Error>")
        if faults.take("status"):
            return self._reply(faults.status, b"<Error><Code>SlowDown</Code></Error>")
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not m or self.server.ignore_range:
            return self._reply(200, data, {"ETag": etag})
        if int(m.group(1)) >= len(data):  # nothing there (an empty object's bytes=0-0 too)
            return self._reply(416, b"", {"ETag": etag, "Content-Range": f"bytes */{len(data)}"})
        first, last = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        body = data[first:last + 1]
        headers = {"ETag": etag, "Content-Range": f"bytes {first}-{last}/{len(data)}"}
        if faults.take("truncate"):
            return self._reply(206, body[: len(body) // 2], headers)
        if faults.take("kill"):
            self._send_partial(headers, len(body), body[: len(body) // 2])
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if faults.take("stall"):
            self._send_partial(headers, len(body), body[:16])
            time.sleep(faults.stall_seconds)
            self.close_connection = True
            return
        self._reply(206, body, headers)

    def _send_partial(self, headers, length, part):
        self.send_response(206)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(part)
        self.wfile.flush()


def _query(path: str) -> dict:
    q = path.partition("?")[2]
    return dict((kv.partition("=")[0], kv.partition("=")[2]) for kv in q.split("&") if kv)


class _UploadHandler:
    """S3's PutObject (PUT without a query) and multipart upload, enough for the writer's tests
    (POST ?uploads=, PUT ?partNumber=N&uploadId=ID, POST ?uploadId=ID, DELETE ?uploadId=ID).
    PUTs are faulted like GETs."""

    def do_POST(self):
        self.server.record(self)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path, q = self.path.partition("?")[0], _query(self.path)
        if "uploads" in q:
            upload = self.server.start_upload(path)
            return self._reply(200, f"<InitiateMultipartUploadResult><UploadId>{upload}</UploadId>"
                                    "</InitiateMultipartUploadResult>".encode())
        parts = self.server.uploads.pop(q.get("uploadId"), None)
        if parts is None:
            return self._reply(404, b"<Error><Code>NoSuchUpload</Code></Error>")
        order = re.findall(rb"<PartNumber>(\d+)</PartNumber>", body)
        self.server.put(path, b"".join(parts[int(n)] for n in order))
        self._reply(200, b"<CompleteMultipartUploadResult></CompleteMultipartUploadResult>")

    def do_PUT(self):
        self.server.record(self)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        q = _query(self.path)
        self.server.gate.wait()
        if self.server.faults.take("status"):
            return self._reply(self.server.faults.status, b"<Error><Code>SlowDown</Code></Error>")
        if not q:
            self.server.put(self.path, body)
            return self._reply(200, b"", {"ETag": self.server.objects[self.path][1]})
        parts = self.server.uploads.get(q.get("uploadId"))
        if parts is None:
            return self._reply(404, b"<Error><Code>NoSuchUpload</Code></Error>")
        parts[int(q["partNumber"])] = body
        self._reply(200, b"", {"ETag": f'"p{q["partNumber"]}"'})

    def do_DELETE(self):
        self.server.record(self)
        self.server.uploads.pop(_query(self.path).get("uploadId"), None)
        self._reply(204)


class _FullHandler(_UploadHandler, _Handler):
    pass


class RangeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # socketserver listens with a backlog of 5; the tests open up to 24 connections at once
    # (3 futures x remote_concurrency 8), and on a busy machine the accept loop falls behind:
    # the kernel then drops the handshakes past the backlog, and the client's SYN retried after
    # 1 s and 3 s overruns the tests' 2 s timeout. Servers in the field listen far deeper.
    request_queue_size = 128

    def __init__(self, tls_dir=None):
        """With `tls_dir`, HTTPS with a self-signed certificate for 127.0.0.1 made there
        (`self.ca_file` is the certificate to trust)."""
        super().__init__(("127.0.0.1", 0), _FullHandler)
        self.ca_file = None
        if tls_dir is not None:
            self.ca_file = self._make_certificate(tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.ca_file, str(tls_dir) + "/key.pem")
            self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.faults = Faults()
        self.require_header: str | None = None
        self.ignore_range = False  # answer every GET with 200 and the whole object
        self.weak_etags = False    # ETags as W/"..." (If-Match never matches those)
        self.redirects: dict[str, str] = {}  # path -> where a 302 sends it
        self.gate = threading.Event()  # cleared: GETs wait for it
        self.gate.set()
        self.requests: list[tuple[str, str, dict]] = []
        self.connections = 0  # accepted so far
        self.uploads: dict[str, dict[int, bytes]] = {}  # multipart uploads in progress
        self._lock = threading.Lock()
        self._version = 0
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def process_request(self, request, client_address):
        with self._lock:
            self.connections += 1
        super().process_request(request, client_address)

    def handle_error(self, request, client_address):
        pass  # a client that hung up (the tests' timeouts and aborts do) is no news

    @staticmethod
    def _make_certificate(tls_dir) -> str:
        cert = str(tls_dir) + "/cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(tls_dir) + "/key.pem", "-out", cert],
                       check=True, capture_output=True)
        return cert

    @property
    def base(self) -> str:
        scheme = "https" if self.ca_file else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"

    def put(self, path: str, data: bytes):
        with self._lock:
            self._version += 1
            etag = f'"v{self._version}"'
            self.objects[path] = (bytes(data), "W/" + etag if self.weak_etags else etag)

    def start_upload(self, path: str) -> str:
        with self._lock:
            self._version += 1
            upload = f"up{self._version}"
            self.uploads[upload] = {}
            return upload

    def record(self, handler):
        with self._lock:
            self.requests.append((handler.command, handler.path, dict(handler.headers.items())))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.gate.set()
        self.shutdown()
        self.server_close()
        self._thread.join()
