"""`gpufile check URL` end to end, with credentials in the URL (a presigned query, a userinfo
password) and in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN):
an object that opens, and each way an open fails (404, 403, 5xx until the retries ran out, a
refused redirect, an s3:// object refused); stdout, stderr and the log at TRACE must show none
of the secrets, and still name the object (its URL redacted: docs/remote.md, "Security").
The server is tests/support/range_server.py on 127.0.0.1.

Usage: check_remote_test.py GPUFILE_CLI
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from range_server import RangeServer  # noqa: E402

CLI = sys.argv[1]
SECRETS = ["pw-S3CR3T-userinfo", "f00dS3CR3Tsignature", "AKIAS3CR3TCREDENTIAL", "FwoS3CR3Ttoken",
           "AKIAS3CR3TENVKEYID", "wJalrS3CR3TENVsecretkey", "IQoS3CR3TENVsessiontoken"]
failures = []


def check(name, url, env, want_rc, want_text):
    r = subprocess.run([CLI, "check", url], capture_output=True, text=True, env=env, timeout=120)
    out = r.stdout + r.stderr
    for s in SECRETS:
        if s in out:
            failures.append(f"{name}: a secret ({s}) in the output: {out!r}")
    if r.returncode != want_rc or want_text not in out:
        failures.append(f"{name}: exit {r.returncode} (want {want_rc}), output {out!r} lacks {want_text!r}")


def main():
    with tempfile.TemporaryDirectory() as tmp, RangeServer() as s:
        log = os.path.join(tmp, "gpufile.log")
        env = dict(os.environ, GPUFILE_LOG_LEVEL="TRACE", GPUFILE_LOG_FILE=log,
                   GPUFILE_REMOTE_RETRIES="2", GPUFILE_REMOTE_BACKOFF_MS="1",
                   AWS_ACCESS_KEY_ID=SECRETS[4], AWS_SECRET_ACCESS_KEY=SECRETS[5],
                   AWS_SESSION_TOKEN=SECRETS[6], AWS_REGION="us-east-1", AWS_ENDPOINT_URL=s.base)
        s.put("/ok", b"x" * 1000)
        s.put("/bucket/ok", b"x" * 1000)
        host = s.base.split("://")[1]
        query = (f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={SECRETS[2]}%2F20261127"
                 f"&X-Amz-Signature={SECRETS[1]}&X-Amz-Security-Token={SECRETS[3]}")
        shown = ("?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED"
                 "&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED")

        def url(path):
            return f"http://alice:{SECRETS[0]}@{host}{path}{query}"

        def redacted(path):
            return f"http://alice:REDACTED@{host}{path}{shown}"

        check("opens", url("/ok"), env, 0, f"object      {redacted('/ok')} (1000 bytes")
        check("s3 opens", "s3://bucket/ok", env, 0, "object      s3://bucket/ok (1000 bytes")
        check("404", url("/missing"), env, 1, redacted("/missing") + ": no such object or bucket")
        s.faults.arm("status", status=503)
        s.faults.head_status = 503
        check("503", url("/ok"), env, 1, redacted("/ok") + ": HTTP 503 (HEAD, 3 tries)")
        s.faults.head_status = None
        s.faults.arm("status", times=0)
        s.redirects["/moved"] = f"ftp://127.0.0.1:1/x?X-Amz-Signature={SECRETS[1]}"
        check("refused redirect", url("/moved"), env, 1,
              "refused a redirect to ftp://127.0.0.1:1/x?X-Amz-Signature=REDACTED")
        s.require_header = "X-Never-Sent"
        check("403", url("/ok"), env, 1, redacted("/ok"))
        check("s3 403", "s3://bucket/ok", env, 1, "s3://bucket/ok")
        signed = [h for _, _, h in s.requests if "Authorization" in h and "AWS4" in h["Authorization"]]
        if not signed:
            failures.append("no s3:// request was signed: the environment's keys were not in play")
        text = open(log).read() if os.path.exists(log) else ""
        if "alice:REDACTED@" not in text:
            failures.append("the log at TRACE names no object: nothing was searched")
        for secret in SECRETS:
            if secret in text:
                failures.append(f"a secret ({secret}) in the log")
    for f in failures:
        print("FAIL", f)
    print("check_remote_test:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
