"""gpufile.safetensors from remote objects: checkpoints at http:// URLs (tests/support/
range_server.py, which records every request) and s3:// URLs (versitygw, as in
test_remote_s3.py), single files and sharded ones by their model.safetensors.index.json, into
host memory and into device memory (the CUDA driver double in CI). docs/remote.md."""
import json
import os
import struct
import sys
import time

import numpy as np
import pytest
from safetensors.numpy import save as st_save_bytes

import gpufile
from gpufile import safetensors as gst
from conftest import needs_gpu_driver
from test_safetensors import assert_same, sample
from test_remote import use_settings
from test_remote_s3 import ACCESS, SECRET, aws_env, versitygw  # noqa: F401 (fixtures)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from range_server import RangeServer  # noqa: E402


def shards(t, nshards=3, names=None):
    """{file name: its bytes} of `t` split over `nshards` files, and the index's bytes."""
    keys = sorted(t)
    names = names or [f"model-{s + 1:05d}-of-{nshards:05d}.safetensors" for s in range(nshards)]
    files, weight_map = {}, {}
    for s in range(nshards):
        part = {n: t[n] for n in keys[s::nshards]}
        files[names[s]] = st_save_bytes(part)
        weight_map.update({n: names[s] for n in part})
    index = json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode()
    return files, index


@pytest.fixture
def http():
    use_settings()
    with RangeServer() as s:
        yield s
    gpufile.driver_close()


def gets(server, path):
    return [h.get("Range") for m, p, h in server.requests if m == "GET" and p == path]


def test_single_file_header_by_ranged_reads(http, rng):
    t = sample(rng)
    blob = st_save_bytes(t, metadata={"k": "v"})
    http.put("/m.safetensors", blob)
    url = http.base + "/m.safetensors"
    header = gst.read_header(url)
    assert header.metadata == {"k": "v"} and set(header.tensors) == set(t)
    (n,) = struct.unpack("<Q", blob[:8])
    # The length, then the header: never the whole object.
    assert gets(http, "/m.safetensors") == ["bytes=0-7", f"bytes=8-{8 + n - 1}"]
    assert_same(gst.load_file(url, framework="numpy"), t)
    assert_same(gst.load_file(url, framework="numpy", views=True), t)


def test_sharded_by_index_url_and_directory_url(http, rng):
    t = sample(rng, 20)
    files, index = shards(t, names=["a.safetensors", "sub/b c.safetensors", "c.safetensors"])
    for name, blob in files.items():
        http.put("/ckpt/" + name.replace(" ", "%20"), blob)  # the server sees the path as sent
    http.put("/ckpt/model.safetensors.index.json", index)
    assert_same(gst.load_file(http.base + "/ckpt/model.safetensors.index.json", framework="numpy"), t)
    assert_same(gst.load_file(http.base + "/ckpt/", framework="numpy"), t)
    # every shard's header and data read through one open of it: one HEAD each per load
    heads = [p for m, p, _ in http.requests if m == "HEAD" and p == "/ckpt/sub/b%20c.safetensors"]
    assert len(heads) == 2


def test_directory_url_without_index_takes_model_safetensors(http, rng):
    t = sample(rng, 4)
    http.put("/one/model.safetensors", st_save_bytes(t))
    assert_same(gst.load_file(http.base + "/one/", framework="numpy"), t)


def test_missing_object_and_missing_shard(http, rng):
    with pytest.raises(FileNotFoundError):
        gst.load_file(http.base + "/nothing.safetensors", framework="numpy")
    t = sample(rng, 6)
    files, index = shards(t, 2)
    http.put("/ck/model.safetensors.index.json", index)
    http.put("/ck/" + next(iter(files)), next(iter(files.values())))  # the second shard is absent
    with pytest.raises(FileNotFoundError) as e:
        gst.load_file(http.base + "/ck/model.safetensors.index.json", framework="numpy")
    assert e.value.filename == http.base + "/ck/model-00002-of-00002.safetensors"


def test_bad_index_and_shard_outside_the_checkpoint(http, rng):
    http.put("/bad/model.safetensors.index.json", b"{not json")
    with pytest.raises(gst.SafetensorError, match="not valid JSON"):
        gst.load_file(http.base + "/bad/model.safetensors.index.json", framework="numpy")
    http.put("/bad/model.safetensors.index.json", json.dumps({"weight_map": {"a": "../x.safetensors"}}).encode())
    with pytest.raises(gst.SafetensorError, match="leaves the checkpoint"):
        gst.load_file(http.base + "/bad/model.safetensors.index.json", framework="numpy")


def test_hostile_header_length_is_refused_before_reading_it(http):
    http.put("/h.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(gst.SafetensorError, match="exceeds the limit"):
        gst.load_file(http.base + "/h.safetensors", framework="numpy")
    assert gets(http, "/h.safetensors") == ["bytes=0-7"]


def test_load_into_and_load_sharded(http, rng):
    t = sample(rng, 9)
    files, index = shards(t)
    for name, blob in files.items():
        http.put("/tp/" + name, blob)
    http.put("/tp/model.safetensors.index.json", index)
    url = http.base + "/tp/model.safetensors.index.json"
    dests = {k: np.full(v.shape, 7, dtype=v.dtype) for k, v in t.items()}
    assert gst.load_into(dests, url) == gst.LoadResult([], [])
    assert_same(dests, t)
    split = {k: 0 for k, v in t.items() if v.ndim >= 1 and v.shape[0] >= 2}
    for rank in range(2):
        part = gst.load_sharded(url, "cpu", split, rank=rank, world_size=2, framework="numpy")
        for k, v in t.items():
            want = np.array_split(v, 2, axis=0)[rank] if k in split else v
            assert np.array_equal(part[k], want), k


def test_safe_open_slices_read_only_their_bytes(http, rng):
    t = {"emb": rng.standard_normal((1000, 64)).astype(np.float32)}
    http.put("/e.safetensors", st_save_bytes(t))
    url = http.base + "/e.safetensors"
    with gst.safe_open(url, framework="numpy") as f:
        before = len(http.requests)
        rows = f.get_slice("emb")[100:110]
        assert np.array_equal(rows, t["emb"][100:110])
        (rng_header,) = [h["Range"] for m, _, h in http.requests[before:] if m == "GET"]
        first, last = (int(x) for x in rng_header[6:].split("-"))
        assert last - first + 1 == 10 * 64 * 4  # just those rows


def test_failure_mid_load_raises_after_every_read_ended(http, rng):
    t = {f"w{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(40)}
    http.put("/f.safetensors", st_save_bytes(t))
    use_settings(remote_retries=0)
    http.faults.arm("status", status=500, after=2 + 5)  # the header's two GETs and 5 tensors pass
    with pytest.raises(OSError, match="HTTP 500"):
        gst.load_file(http.base + "/f.safetensors", framework="numpy")
    assert http.faults.fired["status"] >= 1
    settled = len(http.requests)  # no read still running after the call returned
    time.sleep(0.2)
    assert len(http.requests) == settled


@needs_gpu_driver
def test_into_device_memory(http, rng):
    t = sample(rng, 9)
    files, index = shards(t)
    for name, blob in files.items():
        http.put("/g/" + name, blob)
    http.put("/g/model.safetensors.index.json", index)
    url = http.base + "/g/model.safetensors.index.json"
    for views in (False, True):
        got = gst.load_file(url, device="cuda:0", framework="dlpack", views=views)
        for k, v in t.items():
            assert isinstance(got[k], gpufile.DeviceArray) and got[k].shape == v.shape
            assert got[k].to_bytes() == v.tobytes(), k
    dests = {k: gpufile.DeviceArray.empty(v.shape, got[k].dtype) for k, v in t.items()}
    gst.load_into(dests, url)
    for k, v in t.items():
        assert dests[k].to_bytes() == v.tobytes(), k


# ---- s3:// against versitygw ---------------------------------------------------------------------

@pytest.fixture
def s3(aws_env, versitygw):  # noqa: F811 (the imported fixtures)
    """The bucket "ckpt" of versitygw's backend directory, credentials in the environment."""
    endpoint, root = versitygw
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    (root / "ckpt").mkdir(exist_ok=True)
    return root / "ckpt"


def put_sharded(bucket_dir, folder, t):
    files, index = shards(t)
    (bucket_dir / folder).mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():
        (bucket_dir / folder / name).write_bytes(blob)
    (bucket_dir / folder / "model.safetensors.index.json").write_bytes(index)


def test_s3_sharded_checkpoint_into_host_memory(s3, rng):
    t = sample(rng, 20)
    put_sharded(s3, "llm", t)
    assert_same(gst.load_file("s3://ckpt/llm/model.safetensors.index.json", framework="numpy"), t)
    assert_same(gst.load_file("s3://ckpt/llm/", framework="numpy", views=True), t)
    dests = {k: np.zeros(v.shape, dtype=v.dtype) for k, v in t.items()}
    gst.load_into(dests, "s3://ckpt/llm/model.safetensors.index.json")
    assert_same(dests, t)


def test_s3_folder_without_index_takes_every_safetensors_object_right_under_it(s3, rng):
    """As a local folder: neither an index nor a model.safetensors, so every .safetensors
    object directly in the folder (listed), each tensor in exactly one."""
    t = sample(rng, 12)
    files, _ = shards(t, names=["a.safetensors", "b.safetensors", "c.safetensors"])
    bare = s3 / "bare"
    (bare / "deeper").mkdir(parents=True)
    for name, blob in files.items():
        (bare / name).write_bytes(blob)
    (bare / "notes.txt").write_bytes(b"not a checkpoint")
    (bare / "deeper" / "other.safetensors").write_bytes(st_save_bytes({"elsewhere": np.ones(3)}))
    assert_same(gst.load_file("s3://ckpt/bare/", framework="numpy"), t)
    (bare / "dup.safetensors").write_bytes(st_save_bytes({"layers.0.w": t["layers.0.w"]}))
    with pytest.raises(gst.SafetensorError, match="in both"):
        gst.load_file("s3://ckpt/bare/", framework="numpy")
    (s3 / "nothing").mkdir()
    (s3 / "nothing" / "readme.md").write_bytes(b"x")
    with pytest.raises(gst.SafetensorError, match="no .safetensors objects"):
        gst.load_file("s3://ckpt/nothing/", framework="numpy")


def test_s3_missing_object_and_wrong_secret(s3, aws_env, rng):  # noqa: F811
    with pytest.raises(FileNotFoundError):
        gst.load_file("s3://ckpt/none/model.safetensors", framework="numpy")
    (s3 / "x.safetensors").write_bytes(st_save_bytes(sample(rng, 2)))
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(PermissionError):
        gst.load_file("s3://ckpt/x.safetensors", framework="numpy")


@needs_gpu_driver
def test_s3_into_device_memory(s3, rng):
    t = sample(rng, 9)
    put_sharded(s3, "dev", t)
    got = gst.load_file("s3://ckpt/dev/model.safetensors.index.json", device="cuda:0", framework="dlpack")
    for k, v in t.items():
        assert got[k].to_bytes() == v.tobytes(), k
