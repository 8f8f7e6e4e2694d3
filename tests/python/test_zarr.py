"""gpufile.zarr.GpufileStore: zarr-python 3's own store conformance suite (zarr.testing.store)
on local directories and on versitygw's S3, zarr arrays written and read back (uncompressed,
zstd, blosc, sharded), the byte ranges zarr asks for, and the device-memory path of the store
(GPU buffers) on the CUDA driver double. The zarr-level GPU test needs CuPy (the GPU machine).
docs/python.md, docs/remote.md."""
import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

zarr = pytest.importorskip("zarr", minversion="3.1")  # Python 3.11 or newer

from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest  # noqa: E402
from zarr.codecs import BloscCodec, ZstdCodec  # noqa: E402
from zarr.core.buffer import BufferPrototype, cpu, default_buffer_prototype  # noqa: E402
from zarr.core.buffer import gpu as zarr_gpu  # noqa: E402
from zarr.testing.store import StoreTests  # noqa: E402

import gpufile  # noqa: E402
from gpufile.zarr import DeviceBytes, GpufileStore, parse_list_page  # noqa: E402
from conftest import needs_gpu_driver  # noqa: E402
from test_remote import use_settings  # noqa: E402 (and tests/support on the path)
from range_server import RangeServer  # noqa: E402
from test_remote_s3 import ACCESS, SECRET, aws_env, versitygw  # noqa: E402,F401 (fixtures)

COMPRESSORS = {"none": None, "zstd": ZstdCodec(level=1), "blosc": BloscCodec(cname="lz4")}


def run(coro):
    return asyncio.run(coro)


# ---- the conformance suite of zarr-python, local directories -------------------------------------

class TestLocalConformance(StoreTests[GpufileStore, cpu.Buffer]):
    store_cls = GpufileStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, tmp_path):
        return {"root": str(tmp_path)}

    async def set(self, store, key, value):  # around the store, to test it
        path = Path(store.root, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    async def get(self, store, key):
        return self.buffer_cls.from_bytes(Path(store.root, key).read_bytes())

    def test_store_repr(self, store):
        assert repr(store) == f"GpufileStore({store.root!r}, read_only=False)"

    def test_store_supports_writes(self, store):
        assert store.supports_writes

    def test_store_supports_listing(self, store):
        assert store.supports_listing


# ---- the same on versitygw ---------------------------------------------------------------------

@pytest.fixture
def s3_bucket(aws_env, versitygw):  # noqa: F811
    """versitygw's backend folder of bucket "zarr", credentials in the environment."""
    endpoint, root = versitygw
    aws_env.setenv("AWS_ENDPOINT_URL", endpoint)
    aws_env.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    bucket = root / "zarr"
    bucket.mkdir(exist_ok=True)
    return bucket


class TestS3Conformance(StoreTests[GpufileStore, cpu.Buffer]):
    store_cls = GpufileStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, s3_bucket, request):
        # A prefix of its own for each test, so that they do not see each other's keys.
        self.folder = s3_bucket / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
        return {"root": "s3://zarr/" + self.folder.name}

    async def set(self, store, key, value):  # straight into versitygw's backend folder
        path = self.folder / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    async def get(self, store, key):
        return self.buffer_cls.from_bytes((self.folder / key).read_bytes())

    def test_store_repr(self, store):
        assert repr(store) == f"GpufileStore('s3://zarr/{self.folder.name}', read_only=False)"

    def test_store_supports_writes(self, store):
        assert store.supports_writes

    def test_store_supports_listing(self, store):
        assert store.supports_listing


# ---- zarr arrays ----------------------------------------------------------------------------------

def round_trip(store, compressor, rng, shards=None):
    data = rng.standard_normal((67, 45)).astype(np.float32)
    data[:20, :15] = 0  # a chunk of fill values only: zarr deletes or skips it
    z = zarr.create_array(store, name="a/b", shape=data.shape, chunks=(16, 15), shards=shards,
                          dtype="f4", compressors=compressor, fill_value=0, overwrite=True)
    z[:] = data
    back = zarr.open_array(store, path="a/b", mode="r")
    np.testing.assert_array_equal(back[:], data)
    np.testing.assert_array_equal(back[5:40, 7:33], data[5:40, 7:33])
    return data


@pytest.mark.parametrize("codec", COMPRESSORS)
def test_local_round_trip(tmp_path, rng, codec):
    store = GpufileStore(tmp_path / "z", mode="w")
    gpufile.stats_reset()
    round_trip(store, COMPRESSORS[codec], rng)
    reads = gpufile.stats()["read"]
    assert sum(p["bytes"] for p in reads["paths"].values()) > 0  # the chunks came through gpufile
    # chunk files where zarr's default key encoding puts them; the all-zero chunk is not stored
    assert (tmp_path / "z" / "a" / "b" / "c" / "1" / "1").is_file()
    assert not (tmp_path / "z" / "a" / "b" / "c" / "0" / "0").exists()
    if codec != "none":  # compressed bytes are zarr's codecs' business, not the store's
        assert (tmp_path / "z/a/b/c/1/1").stat().st_size != 16 * 15 * 4


@pytest.mark.parametrize("codec", COMPRESSORS)
def test_s3_round_trip(s3_bucket, rng, codec):
    data = round_trip(GpufileStore("s3://zarr/arrays/" + codec), COMPRESSORS[codec], rng)
    assert (s3_bucket / "arrays" / codec / "a" / "b" / "zarr.json").is_file()
    # the same bytes read by zarr's own LocalStore from versitygw's backend folder
    local = zarr.open_array(zarr.storage.LocalStore(s3_bucket / "arrays" / codec), path="a/b", mode="r")
    np.testing.assert_array_equal(local[:], data)
    # overwriting lists and deletes what was there
    zarr.create_array(GpufileStore("s3://zarr/arrays/" + codec), name="a/b", shape=(3,), dtype="i1",
                      overwrite=True)
    assert not (s3_bucket / "arrays" / codec / "a" / "b" / "c" / "1" / "1").exists()


class Recording(GpufileStore):
    """Records the byte ranges zarr asks for."""

    def __init__(self, *args, asked=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = [] if asked is None else asked  # shared with its read-only copies

    async def get(self, key, prototype=None, byte_range=None):
        self.asked.append((key, byte_range))
        return await super().get(key, prototype, byte_range)

    def with_read_only(self, read_only=False):
        return Recording(self.root, read_only=read_only, asked=self.asked)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_sharded_array_partial_reads(tmp_path, rng, where, request):
    if where == "s3":
        request.getfixturevalue("s3_bucket")
        store = Recording("s3://zarr/sharded")
    else:
        store = Recording(tmp_path / "sh")
    data = round_trip(store, COMPRESSORS["zstd"], rng, shards=(32, 30))
    store.asked.clear()
    back = zarr.open_array(store, path="a/b", mode="r")
    np.testing.assert_array_equal(back[33:40, 31:40], data[33:40, 31:40])  # one inner chunk
    ranged = [r for k, r in store.asked if "/c/" in k]
    assert any(isinstance(r, SuffixByteRequest) for r in ranged)   # the shard's index
    assert any(isinstance(r, RangeByteRequest) for r in ranged)    # then one chunk of it
    assert None not in ranged                                       # never a whole shard


def test_get_byte_ranges_and_missing_keys(tmp_path):
    blob = bytes(range(256)) * 3
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "obj").write_bytes(blob)
    store = GpufileStore(tmp_path, read_only=True)
    proto = default_buffer_prototype()

    def get(key, r=None):
        got = run(store.get(key, proto, r))
        return None if got is None else got.to_bytes()

    assert get("k/obj") == blob
    assert get("k/obj", RangeByteRequest(10, 700)) == blob[10:700]
    assert get("k/obj", RangeByteRequest(700, 10_000)) == blob[700:]  # past the end: the rest
    assert get("k/obj", OffsetByteRequest(500)) == blob[500:]
    assert get("k/obj", SuffixByteRequest(7)) == blob[-7:]
    assert get("k/obj", SuffixByteRequest(10_000)) == blob
    assert get("k/missing") is None and get("nothing/at/all") is None and get("k") is None
    with pytest.raises(ValueError, match="invalid key"):
        get("../escape")
    with pytest.raises(ValueError, match="read-only"):
        run(store.set("x", cpu.Buffer.from_bytes(b"1")))


def test_local_listing_hides_only_writes_in_progress(tmp_path):
    store = GpufileStore(tmp_path)
    run(store.set("a/x.partial", cpu.Buffer.from_bytes(b"1")))  # a key may end in .partial
    (tmp_path / "a" / f"c.{'0' * 32}.partial").write_bytes(b"half")  # a set() not finished
    assert run(collect(store.list())) == ["a/x.partial"]
    assert run(collect(store.list_dir("a"))) == ["x.partial"]


def test_s3_listing_pages_and_prefixes():
    xml = (b'<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
           b"<IsTruncated>true</IsTruncated><Contents><Key>p/a &amp; b</Key><Size>1</Size></Contents>"
           b"<CommonPrefixes><Prefix>p/c/</Prefix></CommonPrefixes>"
           b"<NextContinuationToken>t/1=</NextContinuationToken></ListBucketResult>")
    page = parse_list_page(xml)
    assert page.keys == ["p/a & b"] and page.prefixes == ["p/c/"] and page.next_token == "t/1="
    last = parse_list_page(b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>")
    assert last.keys == [] and last.next_token is None
    with pytest.raises(OSError, match="without a NextContinuationToken"):
        parse_list_page(b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")


def test_s3_listing_past_one_page(s3_bucket, monkeypatch):
    folder = s3_bucket / "many"
    (folder / "d").mkdir(parents=True)
    for i in range(25):
        (folder / "d" / f"k{i:02d}").write_bytes(b"x")
    store = GpufileStore("s3://zarr/many")
    pages = []
    real = gpufile._gpufile._s3_list_page

    def recorded(url, prefix, delimiter, token, max_keys):
        pages.append(token)
        return real(url, prefix, delimiter, token, max_keys)

    monkeypatch.setattr(gpufile._gpufile, "_s3_list_page", recorded)
    monkeypatch.setattr(gpufile.zarr, "LIST_PAGE_KEYS", 10)
    keys = run(collect(store.list_prefix("d/")))
    assert keys == [f"d/k{i:02d}" for i in range(25)]
    assert len(pages) == 3 and pages[0] == "" and all(pages[1:])  # continued twice
    assert run(collect(store.list_dir(""))) == ["d"]
    assert run(collect(store.list_dir("d"))) == [f"k{i:02d}" for i in range(25)]


async def collect(agen):
    return [x async for x in agen]


# ---- GPU memory ---------------------------------------------------------------------------------

class DoubleGpuBuffer(zarr_gpu.Buffer):
    """zarr's GPU buffer class, holding gpufile.zarr.DeviceBytes instead of a CuPy array (CI has
    no CuPy): the store sees the prototype zarr.config.enable_gpu() gives and must read into
    device memory."""

    def __init__(self, array_like):
        self._data = array_like

    @classmethod
    def create_zero_length(cls):
        return cls(DeviceBytes(0))

    def __len__(self):
        return len(self._data)


DOUBLE_GPU = BufferPrototype(buffer=DoubleGpuBuffer, nd_buffer=zarr_gpu.NDBuffer)


def device_get(store, key, byte_range=None):
    got = run(store.get(key, DOUBLE_GPU, byte_range))
    assert isinstance(got, DoubleGpuBuffer)
    if isinstance(got._data, DeviceBytes):  # no CuPy (CI): gpufile's own device memory
        return got._data.to_host().tobytes()
    import cupy  # where CuPy is installed the store allocates with it, as zarr's buffers do
    assert isinstance(got._data, cupy.ndarray) and got._data.dtype == cupy.uint8
    return cupy.asnumpy(got._data).tobytes()


@needs_gpu_driver
@pytest.mark.parametrize("where", ["local", "s3"])
def test_reads_land_in_device_memory_and_writes_leave_from_it(tmp_path, rng, where, request):
    if where == "s3":
        request.getfixturevalue("s3_bucket")
        store = GpufileStore("s3://zarr/gpu")
    else:
        store = GpufileStore(tmp_path / "g")
    blob = rng.integers(0, 256, size=300_001, dtype=np.uint8)
    src = DeviceBytes(blob.size)
    src.buffer.copy_from_host(blob)
    run(store.set("arr/c/0/1", DoubleGpuBuffer(src)))  # written from device memory
    assert run(store.get("arr/c/0/1", default_buffer_prototype())).to_bytes() == blob.tobytes()
    assert device_get(store, "arr/c/0/1") == blob.tobytes()
    assert device_get(store, "arr/c/0/1", RangeByteRequest(1000, 5000)) == blob[1000:5000].tobytes()
    assert device_get(store, "arr/c/0/1", SuffixByteRequest(16)) == blob[-16:].tobytes()
    assert run(store.get("arr/c/9/9", DOUBLE_GPU)) is None
    run(store.set("empty", DoubleGpuBuffer(DeviceBytes(0))))
    assert device_get(store, "empty") == b""


try:
    import cupy  # noqa: F401
    has_cupy = True
except ImportError:
    has_cupy = False


class Seen(GpufileStore):
    """Records what memory each chunk read of the store gave zarr."""
    kinds: list = []

    async def get(self, key, prototype=None, byte_range=None):
        got = await super().get(key, prototype, byte_range)
        if got is not None and "/c/" in key:
            Seen.kinds.append(type(got.as_array_like()).__module__.split(".")[0])
        return got


@pytest.mark.skipif(not has_cupy, reason="zarr's GPU buffers need CuPy (the GPU machine)")
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_zarr_gpu_arrays(tmp_path, rng, codec):
    import cupy
    store = Seen(tmp_path / "cp")
    data = round_trip(store, COMPRESSORS[codec], rng)
    Seen.kinds.clear()
    with zarr.config.enable_gpu():
        z = zarr.open_array(store, path="a/b", mode="r+")
        got = z[:]
        assert isinstance(got, cupy.ndarray)
        cupy.testing.assert_array_equal(got, cupy.asarray(data))
        assert Seen.kinds and set(Seen.kinds) == {"cupy"}  # chunks read straight into GPU memory
        z[:4] = cupy.arange(4 * 45, dtype=cupy.float32).reshape(4, 45)  # written from the GPU
    np.testing.assert_array_equal(zarr.open_array(store, path="a/b", mode="r")[:4],
                                  np.arange(4 * 45, dtype=np.float32).reshape(4, 45))


def test_s3_chunk_gets_are_one_get_without_head(aws_env, rng):
    """A whole chunk is one GET (size from the reply), not a HEAD and then a ranged GET; a
    missing chunk is still None. Against the tests' range server as the S3 endpoint, which
    records every request."""
    with RangeServer() as s:
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        data = rng.bytes(300_000)
        s.put("/bkt/arr/c/0/0", data)
        store = GpufileStore("s3://bkt/arr", read_only=True)
        prototype = default_buffer_prototype()
        assert store.get_sync("c/0/0", prototype=prototype).to_bytes() == data
        assert store.get_sync("c/0/1", prototype=prototype) is None
        assert [(r[0], r[1]) for r in s.requests] == [("GET", "/bkt/arr/c/0/0"), ("GET", "/bkt/arr/c/0/1")]
        assert all("Range" not in r[2] for r in s.requests)


@needs_gpu_driver
def test_s3_chunk_gets_into_device_memory_are_one_get(aws_env, rng):
    """A whole chunk got into zarr's GPU buffers is one GET too (no HEAD: into host memory,
    then one copy into GPU memory); a range still opens the object (HEAD, then a ranged GET)."""
    with RangeServer() as s:
        aws_env.setenv("AWS_ENDPOINT_URL", s.base)
        data = rng.bytes(300_000)
        s.put("/bkt/arr/c/0/0", data)
        s.put("/bkt/arr/c/0/2", b"")
        store = GpufileStore("s3://bkt/arr", read_only=True)
        assert device_get(store, "c/0/0") == data
        assert run(store.get("c/0/1", DOUBLE_GPU)) is None
        assert device_get(store, "c/0/2") == b""
        assert [(r[0], r[1]) for r in s.requests] == [
            ("GET", "/bkt/arr/c/0/0"), ("GET", "/bkt/arr/c/0/1"), ("GET", "/bkt/arr/c/0/2")]
        assert all("Range" not in r[2] for r in s.requests)
        s.requests.clear()
        assert device_get(store, "c/0/0", RangeByteRequest(10, 5000)) == data[10:5000]
        assert [r[0] for r in s.requests] == ["HEAD", "GET"]
