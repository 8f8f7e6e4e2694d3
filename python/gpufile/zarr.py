"""A Zarr v3 store for zarr-python 3 whose reads and writes go through gpufile.

    import zarr
    from gpufile.zarr import GpufileStore
    store = GpufileStore("/data/run.zarr")             # or "s3://bucket/prefix"
    z = zarr.create_array(store, shape=(4096, 4096), chunks=(512, 512), dtype="f4")
    z[:] = values
    zarr.config.enable_gpu()                            # then chunks land in GPU memory
    block = zarr.open_array(store, mode="r")[:512]      # a CuPy array

Local directories: every chunk is a file read with gpufile.File (and written through one, then
renamed into place). ``s3://bucket/prefix``: a chunk is an object read whole with one GET
(into host memory, then copied into GPU memory for zarr's GPU buffers), a byte range with
gpufile's RemoteFile (ranged GETs, straight into GPU memory for GPU buffers), written with one PUT (or a multipart upload when larger than a part), listed with
ListObjectsV2 and deleted with DeleteObject, all signed by libcurl as gpufile's other S3
requests are (docs/remote.md). When zarr asks for GPU buffers (``zarr.config.enable_gpu()``),
chunk bytes are read straight into GPU memory; decompression stays with zarr's codecs.
"""
from __future__ import annotations

import asyncio
import os
import re
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, List, Optional, Tuple

import numpy as np

try:
    from zarr.abc.store import (ByteRequest, OffsetByteRequest, RangeByteRequest, Store,
                                SuffixByteRequest)
    from zarr.core.buffer import Buffer, BufferPrototype
    from zarr.core.buffer.core import default_buffer_prototype
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("gpufile.zarr needs zarr-python 3 (Python 3.11 or newer): "
                      "pip install 'zarr>=3.1'") from e

from . import _gpufile
from ._gpufile import DeviceBuffer, File, RemoteFile, RemoteWriter
from ._s3 import PAGE_KEYS, list_all, parse_list_page  # noqa: F401 (parse_list_page: tests)

if TYPE_CHECKING:
    from typing import Self

__all__ = ["DeviceBytes", "GpufileStore"]

_S3 = "s3://"
LIST_PAGE_KEYS = PAGE_KEYS  # keys a ListObjectsV2 page asks for (tests make it smaller)


class GpufileStore(Store):
    """A zarr store on a local directory or under an ``s3://bucket/prefix``, read and written
    through gpufile.

    `mode`: "r" opens it read-only; "r+", "a", "w" and "w-" writable (zarr's own `mode` says what
    happens to what is there already). A local root is made on first use when writable.
    """

    supports_writes = True
    supports_deletes = True
    supports_listing = True

    def __init__(self, root: "str | os.PathLike[str]", *, read_only: bool = False,
                 mode: Optional[str] = None) -> None:
        if mode is not None:
            if mode not in ("r", "r+", "a", "w", "w-"):
                raise ValueError(f"mode {mode!r}: use 'r', 'r+', 'a', 'w' or 'w-'")
            read_only = mode == "r"
        super().__init__(read_only=read_only)
        text = os.fspath(root)
        self._s3 = text[:5].lower() == _S3
        if self._s3:
            bucket, _, prefix = text[5:].partition("/")
            if not bucket:
                raise ValueError(_gpufile._redact_text(f"{text}: no bucket (s3://BUCKET/PREFIX)"))
            self._bucket, self._prefix = bucket, prefix.strip("/")
            self.root = _S3 + bucket + ("/" + self._prefix if self._prefix else "")
        elif text[:8].lower().startswith(("http://", "https://")):
            raise ValueError(_gpufile._redact_url(text) + ": http(s):// has no listing nor writes; "
                             "use a local directory or s3://bucket/prefix")
        else:
            self.root = os.path.abspath(text)

    # ---- the store itself -----------------------------------------------------------------------

    def with_read_only(self, read_only: bool = False) -> "Self":
        return type(self)(self.root, read_only=read_only)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpufileStore) and self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __str__(self) -> str:
        return self.root if self._s3 else "file://" + self.root

    def __repr__(self) -> str:
        return f"GpufileStore({_gpufile._redact_url(self.root)!r}, read_only={self.read_only})"

    async def _open(self) -> None:
        if self._is_open:
            raise ValueError("store is already open")
        self._ensure_open_sync()

    def _ensure_open_sync(self) -> None:
        if not self._is_open:
            if not self._s3:
                if not self.read_only:
                    os.makedirs(self.root, exist_ok=True)
                elif not os.path.isdir(self.root):
                    raise FileNotFoundError(f"{self.root} does not exist")
            self._is_open = True

    def _where(self, key: str) -> str:
        """The file or object of `key`; keys that would leave the root are refused."""
        parts = key.split("/")
        if key.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"invalid key {key!r} for a zarr store")
        if self._s3:
            return self.root + "/" + key
        return os.path.join(self.root, *parts)

    # ---- reads --------------------------------------------------------------------------------

    async def get(self, key: str, prototype: Optional[BufferPrototype] = None,
                  byte_range: Optional[ByteRequest] = None) -> Optional[Buffer]:
        if prototype is None:
            prototype = default_buffer_prototype()
        await self._ensure_open()
        # The read runs on a worker thread, whose current CUDA device is not the caller's.
        device = _callers_device() if wants_device_memory(prototype) else None
        return await asyncio.to_thread(self._get, key, prototype, byte_range, device)

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[Tuple[str, Optional[ByteRequest]]]) -> List[Optional[Buffer]]:
        return list(await asyncio.gather(*(self.get(key, prototype, r) for key, r in key_ranges)))

    def _get(self, key: str, prototype: BufferPrototype, byte_range: Optional[ByteRequest],
             device: Optional[int]) -> Optional[Buffer]:
        where = self._where(key)
        if not self._s3 and os.path.isdir(where):
            return None
        if self._s3 and byte_range is None:
            return self._get_whole(where, prototype, device)
        try:
            f = RemoteFile(where) if self._s3 else File(where, "r")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        with f:
            return read_range(f, prototype, byte_range, device)

    @staticmethod
    def _get_whole(url: str, prototype: BufferPrototype, device: Optional[int]) -> Optional[Buffer]:
        """A whole object: one GET, without the HEAD that opening a RemoteFile sends (a chunk
        read this way is one round trip, not two). It lands in host memory; for zarr's GPU
        buffers it is then copied into GPU memory of `device`, in one copy."""
        try:
            data = _gpufile._remote_get(url)
        except FileNotFoundError:
            return None
        if not wants_device_memory(prototype):
            return prototype.buffer.from_bytes(data)
        if not data:
            return prototype.buffer.create_zero_length()
        out = device_bytes(len(data), device)
        copy_to_device(out, np.frombuffer(data, dtype=np.uint8))
        return prototype.buffer.from_array_like(out)

    # zarr's synchronous protocols (SupportsGetSync, SupportsSetSync, SupportsDeleteSync): the
    # same on the calling thread.
    def get_sync(self, key: str, *, prototype: Optional[BufferPrototype] = None,
                 byte_range: Optional[ByteRequest] = None) -> Optional[Buffer]:
        if prototype is None:
            prototype = default_buffer_prototype()
        self._ensure_open_sync()
        return self._get(key, prototype, byte_range, None)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._ensure_open_sync()
        self._check_writable()
        self._check_value(value)
        self._set(key, value, False)

    def delete_sync(self, key: str) -> None:
        self._ensure_open_sync()
        self._check_writable()
        self._delete(key)

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._exists, key)

    def _exists(self, key: str) -> bool:
        if not self._s3:
            return os.path.isfile(self._where(key))
        try:
            RemoteFile(self._where(key)).close()  # one HEAD
        except FileNotFoundError:
            return False
        return True

    async def getsize(self, key: str) -> int:
        return await asyncio.to_thread(self._getsize, key)

    def _getsize(self, key: str) -> int:
        if not self._s3:
            return os.path.getsize(self._where(key))
        with RemoteFile(self._where(key)) as f:
            return f.size()

    # ---- writes -------------------------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        await self._ensure_open()
        self._check_writable()
        self._check_value(value)
        await asyncio.to_thread(self._set, key, value, False)

    @staticmethod
    def _check_value(value: Any) -> None:
        if not isinstance(value, Buffer):
            raise TypeError(f"GpufileStore.set: value must be a zarr Buffer, not {type(value).__name__}")

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._ensure_open()
        self._check_writable()
        if self._s3:  # S3 has no create-if-absent here: zarr's check-then-write, with its race
            if not await self.exists(key):
                await self.set(key, value)
            return
        try:
            await asyncio.to_thread(self._set, key, value, True)
        except FileExistsError:
            pass

    def _set(self, key: str, value: Buffer, exclusive: bool) -> None:
        data = value.as_array_like()  # NumPy, or CuPy for GPU buffers: written from GPU memory
        where = self._where(key)
        if self._s3:
            with RemoteWriter(where) as w:
                if len(value):
                    w.write(data)
            return
        os.makedirs(os.path.dirname(where), exist_ok=True)
        # Written aside, then renamed into place: a reader never sees half a chunk.
        partial = f"{where}.{uuid.uuid4().hex}.partial"
        try:
            with File(partial, "w") as f:
                if len(value):
                    f.write(data)
            if exclusive:
                os.link(partial, where)  # FileExistsError if it is there
                os.unlink(partial)
            else:
                os.replace(partial, where)
        except BaseException:
            try:
                os.unlink(partial)
            except FileNotFoundError:
                pass
            raise

    async def delete(self, key: str) -> None:
        self._check_writable()
        await asyncio.to_thread(self._delete, key)

    def _delete(self, key: str) -> None:
        where = self._where(key)
        if self._s3:
            _gpufile._s3_delete(where)
            return
        try:
            os.unlink(where)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            self._delete_tree(key)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        if self._s3:  # one DeleteObject a key (DeleteObjects would need a Content-MD5)
            prefix = prefix.strip("/")
            keys = await asyncio.to_thread(self._list_prefix, prefix + "/" if prefix else "")
            await asyncio.gather(*(asyncio.to_thread(self._delete, k) for k in keys))
            return
        await asyncio.to_thread(self._delete_tree, prefix)

    def _delete_tree(self, prefix: str) -> None:
        import shutil
        where = self._where(prefix.strip("/")) if prefix.strip("/") else self.root
        if os.path.isfile(where):
            raise ValueError(f"delete_dir: {prefix!r} is a key, not a prefix")
        if not os.path.isdir(where):
            return
        if where != self.root:
            shutil.rmtree(where)
            return
        for entry in os.listdir(where):  # the root itself stays, as a fresh store has it
            path = os.path.join(where, entry)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)

    # ---- listing ------------------------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self._list_prefix, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self._list_prefix, prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in await asyncio.to_thread(self._list_dir, prefix):
            yield name

    def _list_prefix(self, prefix: str) -> List[str]:
        """Every key that starts with `prefix` (a string prefix, as the ABC says)."""
        if self._s3:
            keys, _ = self._s3_list(self._full(prefix), "")
            return keys
        out = []
        for dirpath, _, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for name in files:
                key = name if rel == "." else rel.replace(os.sep, "/") + "/" + name
                if key.startswith(prefix) and not _is_partial(name):
                    out.append(key)
        return sorted(out)

    def _list_dir(self, prefix: str) -> List[str]:
        """The names right under `prefix` (a directory of keys): keys and deeper prefixes."""
        prefix = prefix.strip("/")
        if self._s3:
            keys, dirs = self._s3_list(self._full(prefix + "/" if prefix else ""), "/")
            return sorted(set(keys) | {d.rstrip("/") for d in dirs})
        base = self._where(prefix) if prefix else self.root
        try:
            return sorted(n for n in os.listdir(base) if not _is_partial(n))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _full(self, prefix: str) -> str:
        """A store prefix as a prefix of the bucket's keys."""
        return self._prefix + "/" + prefix if self._prefix else prefix

    def _s3_list(self, full_prefix: str, delimiter: str) -> Tuple[List[str], List[str]]:
        """Keys and common prefixes under `full_prefix`, relative to `full_prefix`'s directory
        in the store (ListObjectsV2, page after page)."""
        strip = len(self._prefix) + 1 if self._prefix else 0
        keys, prefixes = list_all(_S3 + self._bucket, full_prefix, delimiter, LIST_PAGE_KEYS)
        keys = [k[strip:] for k in keys]
        prefixes = [p[strip:] for p in prefixes]
        if delimiter:  # relative to the listed directory
            cut = len(full_prefix) - strip
            keys = [k[cut:] for k in keys]
            prefixes = [p[cut:] for p in prefixes]
        return keys, prefixes


_PARTIAL = re.compile(r".*\.[0-9a-f]{32}\.partial")


def _is_partial(name: str) -> bool:
    """A write in progress (_set's file beside its key), not a key."""
    return _PARTIAL.fullmatch(name) is not None


# ---- reading a byte range into the prototype's memory ---------------------------------------------

def _span(size: int, byte_range: Optional[ByteRequest]) -> Tuple[int, int]:
    """(offset, length) of `byte_range` in an object of `size` bytes, clamped to its end as
    zarr's stores do."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        start = min(byte_range.start, size)
        return start, max(0, min(byte_range.end, size) - start)
    if isinstance(byte_range, OffsetByteRequest):
        start = min(byte_range.offset, size)
        return start, size - start
    if isinstance(byte_range, SuffixByteRequest):
        start = max(0, size - byte_range.suffix)
        return start, size - start
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def wants_device_memory(prototype: BufferPrototype) -> bool:
    """Whether zarr asks for GPU buffers (zarr.config.enable_gpu(), or a gpu prototype)."""
    from zarr.core.buffer import gpu
    return isinstance(prototype.buffer, type) and issubclass(prototype.buffer, gpu.Buffer)


def read_range(f: Any, prototype: BufferPrototype, byte_range: Optional[ByteRequest],
               device: Optional[int] = None) -> Buffer:
    """Bytes `byte_range` of an open gpufile.File or RemoteFile as a buffer of `prototype`:
    read straight into GPU memory of `device` (default: the current one) when the prototype is
    zarr's GPU buffer, else into host memory."""
    offset, length = _span(f.size(), byte_range)
    if length == 0:
        return prototype.buffer.create_zero_length()
    out = device_bytes(length, device) if wants_device_memory(prototype) else np.empty(length, dtype=np.uint8)
    got = f.read(out, size=length, file_offset=offset)
    if got != length:
        raise OSError(f"{_gpufile._redact_url(f.name)}: {got} of {length} bytes at {offset}: "
                      "the object changed while read?")
    return prototype.buffer.from_array_like(out)


def _callers_device() -> Optional[int]:
    try:
        import cupy
    except ImportError:
        return None
    return int(cupy.cuda.runtime.getDevice())


def device_bytes(nbytes: int, device: Optional[int] = None) -> Any:
    """A 1-D uint8 array of GPU memory on `device` (default: the current one): CuPy's (its
    memory pool) where CuPy is installed, as zarr's GPU buffers hold; else gpufile's own
    (DeviceBytes)."""
    try:
        import cupy
    except ImportError:
        return DeviceBytes(nbytes, device or 0)
    with cupy.cuda.Device(device if device is not None else cupy.cuda.runtime.getDevice()):
        out = cupy.empty(nbytes, dtype=cupy.uint8)
        # The pool may hand out memory that kernels queued on the current stream still use;
        # gpufile's read is ordered on no stream of CuPy's, so let that work finish first.
        cupy.cuda.get_current_stream().synchronize()
    return out


def copy_to_device(out: Any, host: np.ndarray) -> None:
    """Host bytes into GPU memory of device_bytes(): CuPy's copy (on its current stream, which
    zarr's later work on the array follows), or gpufile's for DeviceBytes."""
    if isinstance(out, DeviceBytes):
        out.buffer.copy_from_host(host)
        return
    import cupy
    with cupy.cuda.Device(out.device):
        out.set(host)


class DeviceBytes:
    """GPU memory of gpufile's own (a DeviceBuffer) as a 1-D uint8 array-like, for frameworks
    that take ``__cuda_array_interface__``."""

    ndim = 1
    dtype = np.dtype(np.uint8)

    def __init__(self, nbytes: int, device: int = 0):
        self.buffer = DeviceBuffer(nbytes, device)

    @property
    def size(self) -> int:
        return self.buffer.nbytes

    @property
    def shape(self) -> Tuple[int]:
        return (self.buffer.nbytes,)

    def __len__(self) -> int:
        return self.buffer.nbytes

    @property
    def __cuda_array_interface__(self) -> dict:
        return self.buffer.__cuda_array_interface__

    def to_host(self) -> np.ndarray:
        out = np.empty(self.buffer.nbytes, dtype=np.uint8)
        self.buffer.copy_to_host(out)
        return out
