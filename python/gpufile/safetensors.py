"""safetensors checkpoints straight into GPU memory, and back.

    from gpufile.safetensors import load_file, save_file, safe_open
    tensors = load_file("model.safetensors", device="cuda:0")       # dict of torch tensors
    tensors = load_file("model.safetensors.index.json", device="cuda:0")   # sharded checkpoints
    save_file(tensors, "copy.safetensors")

The file format is the `safetensors` package's: files written by either load with the other.
Every tensor's bytes go from the file to its final place in one IO through gpufile's pipelined
data path (no extra copy, bounded pinned staging memory whatever the checkpoint's size).

Lifetime: returned tensors own their memory. With ``views=True`` every tensor of a file is a view
into one allocation holding the whole data section (one large read, the fastest load); that
allocation lives as long as any of its views.

Frameworks: "pt" (torch tensors), "numpy" (host only), "dlpack" (gpufile.DeviceArray objects on
the GPU, which torch, CuPy and JAX take with from_dlpack, without a copy).
"""
from __future__ import annotations

import functools
import json
import os
import struct
import threading
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple, Union)

from . import _dtypes
from ._gpufile import DeviceBuffer, File, RemoteFile, _open_session, _redact_text, driver_is_open

# What a plain load_file needs is imported here; the rest on first use (docs/python.md, "Import
# cost"): the scatter of split tensors (_scatter, _boxes: load_sharded, load_into, safe_open's
# slices) and DeviceArray (framework="dlpack").
if TYPE_CHECKING:
    from . import _scatter
    from ._arrays import DeviceArray

    # A plan: (source, direct reads [(ptr, nbytes, file offset, what)], scatters [_scatter.Scatter]).
    _Plan = Tuple["_Source", Sequence[Tuple[int, int, int, str]], Sequence["_scatter.Scatter"]]

__all__ = ["SafetensorError", "TensorInfo", "Header", "parse_header", "read_header", "load_file",
           "save_file", "safe_open", "load_sharded", "load_into", "LoadResult", "shard_slice"]

# The safetensors package refuses headers larger than this; so do we (a hostile file could
# otherwise make us allocate and parse gigabytes).
MAX_HEADER_SIZE = 100_000_000
_ALIGNMENT = 8  # the header is padded with spaces so the data section starts 8-aligned
_MAX_COUNT = 1 << 63

PathLike = Union[str, "os.PathLike[str]"]


class SafetensorError(ValueError):
    """A malformed or unsupported safetensors file, or a bad argument."""

    def __init__(self, message: str = "") -> None:
        # Messages name files and URLs; a URL shows no signature, token or password (the C++
        # rules, src/core/redact.hpp, docs/remote.md "Security").
        super().__init__(_redact_text(str(message)))


class TensorInfo(NamedTuple):
    name: str
    dtype: str                 # safetensors dtype name
    shape: Tuple[int, ...]
    begin: int                 # byte offsets within the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


class Header(NamedTuple):
    metadata: Optional[Dict[str, str]]
    tensors: Dict[str, TensorInfo]  # in file order
    data_start: int                 # file offset of the data section
    file_size: int


# ---- the header ---------------------------------------------------------------------------------

def _reject_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise SafetensorError(f"duplicate key {key!r} in the header")
        out[key] = value
    return out


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _tensor_info(name: str, entry: Any) -> TensorInfo:
    if not isinstance(entry, dict):
        raise SafetensorError(f"tensor {name!r}: its header entry is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str):
        raise SafetensorError(f"tensor {name!r}: missing or non-string dtype")
    d = _dtypes.BY_NAME.get(dtype)
    if d is None:
        raise SafetensorError(f"tensor {name!r}: unknown or unsupported dtype {dtype!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        raise SafetensorError(f"tensor {name!r}: shape must be a list of non-negative integers")
    offsets = entry.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(n) for n in offsets)
            or offsets[0] > offsets[1]):
        raise SafetensorError(f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end")
    # Sizes beyond what a signed 64-bit count holds are refused here: no framework can allocate
    # them, and the safetensors package refuses them too.
    count = 1
    for n in shape:
        if n >= _MAX_COUNT:
            raise SafetensorError(f"tensor {name!r}: dimension {n} is too large")
        count *= n
    if count * d.itemsize >= _MAX_COUNT:
        raise SafetensorError(f"tensor {name!r}: shape {shape} is too large")
    begin, end = offsets
    if count * d.itemsize != end - begin:
        raise SafetensorError(f"tensor {name!r}: shape {shape} of {dtype} is {count * d.itemsize} bytes, "
                              f"but data_offsets span {end - begin}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def parse_header(prefix: bytes, file_size: int) -> Header:
    """Parses and checks a safetensors header.

    `prefix` holds at least the file's first 8 + header-length bytes; `file_size` is the whole
    file's size. Raises SafetensorError for anything the format does not allow: a header length
    past the end of the file or over MAX_HEADER_SIZE, invalid JSON, unknown dtypes, shapes that do
    not match their byte counts, and tensors that overlap, leave holes, or run past the end.
    """
    if file_size < 8 or len(prefix) < 8:
        raise SafetensorError("file too small to be safetensors: no 8-byte header length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER_SIZE:
        raise SafetensorError(f"header length {n} exceeds the limit of {MAX_HEADER_SIZE} bytes")
    if 8 + n > file_size:
        raise SafetensorError(f"header length {n} runs past the end of the {file_size}-byte file")
    if len(prefix) < 8 + n:
        raise SafetensorError("the header is shorter than its stated length")
    raw = bytes(prefix[8:8 + n])
    if not raw.startswith(b"{"):
        raise SafetensorError("the header is not a JSON object")
    try:
        root = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except SafetensorError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SafetensorError(f"the header is not valid JSON: {e}") from None
    if not isinstance(root, dict):
        raise SafetensorError("the header is not a JSON object")

    metadata = root.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorError("__metadata__ must map strings to strings")
    infos = [_tensor_info(name, entry) for name, entry in root.items()]

    # The tensors must tile the data section exactly, as the safetensors package requires.
    data_len = file_size - 8 - n
    at = 0
    for info in sorted(infos, key=lambda t: (t.begin, t.end)):
        if info.begin != at:
            what = "overlaps the tensor before it" if info.begin < at else "leaves a hole before it"
            raise SafetensorError(f"tensor {info.name!r} at [{info.begin}, {info.end}) {what}")
        at = info.end
    if at != data_len:
        raise SafetensorError(f"the tensors cover {at} bytes but the data section holds {data_len}")
    infos.sort(key=lambda t: (t.begin, t.end))  # the order checked: an empty tensor first
    return Header(metadata, {t.name: t for t in infos}, 8 + n, file_size)


def read_header(path: PathLike) -> Header:
    """Reads and checks the header of a safetensors file (a few small reads, no data).

    `path` may be an ``s3://``, ``http://`` or ``https://`` URL: the 8-byte length and the header
    are then read with two ranged reads, not the whole object."""
    if _is_url(path):
        with RemoteFile(os.fspath(path)) as f:
            return _remote_header(f)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) == 8:
            (n,) = struct.unpack("<Q", head)
            if n <= MAX_HEADER_SIZE and 8 + n <= size:
                head += f.read(n)
        return parse_header(head, size)


_URL_SCHEMES = ("s3://", "http://", "https://")


def _is_url(path: Any) -> bool:
    return isinstance(path, str) and path[:8].lower().startswith(_URL_SCHEMES)


def _read_exactly(f: RemoteFile, nbytes: int, offset: int) -> bytes:
    out = bytearray(nbytes)
    if nbytes and f.read(out, size=nbytes, file_offset=offset) != nbytes:
        raise SafetensorError(f"{f.name}: the object ended before byte {offset + nbytes}")
    return bytes(out)


def _remote_header(f: RemoteFile) -> Header:
    """The header of an open remote object: the length, then the header, as two ranged reads
    (through the one RemoteFile, so both are of the version its open pinned)."""
    size = f.size()
    head = _read_exactly(f, min(8, size), 0)
    if len(head) == 8:
        (n,) = struct.unpack("<Q", head)
        if n <= MAX_HEADER_SIZE and 8 + n <= size:
            head += _read_exactly(f, n, 8)
    return parse_header(head, size)


# ---- devices and frameworks --------------------------------------------------------------------

class _Target(NamedTuple):
    framework: str      # "pt" | "numpy" | "dlpack"
    cuda: bool
    ordinal: int        # CUDA device number
    torch_device: Any   # torch.device for "pt", else None


def _target(framework: str, device: Any) -> _Target:
    if framework in ("np",):
        framework = "numpy"
    if framework not in ("pt", "torch", "numpy", "dlpack"):
        raise SafetensorError(f"unknown framework {framework!r}: use 'pt', 'numpy' or 'dlpack'")
    framework = "pt" if framework == "torch" else framework
    text = str(device) if not isinstance(device, int) else f"cuda:{device}"
    if text == "cpu":
        cuda, index = False, 0
    elif text == "cuda" or text.startswith("cuda:"):
        cuda = True
        try:
            index = int(text[5:]) if text.startswith("cuda:") else 0
        except ValueError:
            raise SafetensorError(f"bad device {device!r}") from None
    else:
        raise SafetensorError(f"unsupported device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")
    if framework == "numpy" and cuda:
        raise SafetensorError("framework 'numpy' loads into host memory only: use device='cpu'")
    if framework == "dlpack" and not cuda:
        raise SafetensorError("framework 'dlpack' loads into GPU memory: use device='cuda:N'")
    torch_device = None
    if framework == "pt":
        import torch
        torch_device = torch.device("cuda", index) if cuda else torch.device("cpu")
    return _Target(framework, cuda, index, torch_device)


def _torch_dtype(name: str):
    import torch
    dt = getattr(torch, _dtypes.BY_NAME[name].torch, None)
    if dt is None:
        raise SafetensorError(f"this torch has no {_dtypes.BY_NAME[name].torch} for {name}")
    return dt


def _numpy_dtype(name: str):
    import numpy as np
    d = _dtypes.BY_NAME[name]
    if d.numpy is None:
        raise SafetensorError(f"NumPy has no dtype for {name}: load it with framework='pt' or 'dlpack'")
    return np.dtype(d.numpy)


class _Dest(NamedTuple):
    obj: Any      # what the caller gets (it keeps the memory alive while IO runs)
    ptr: int      # where its bytes go


def _allocate(t: _Target, dtype: str, shape: Tuple[int, ...]) -> _Dest:
    """A new, owning array of `shape` for one tensor."""
    try:
        return _allocate_unchecked(t, dtype, shape)
    except (ValueError, OverflowError) as e:  # shapes the framework cannot represent (not OOM)
        if isinstance(e, SafetensorError):
            raise
        raise SafetensorError(f"cannot make a {dtype} array of shape {list(shape)}: {e}") from None


def _allocate_unchecked(t: _Target, dtype: str, shape: Tuple[int, ...]) -> _Dest:
    if t.framework == "pt":
        import torch
        x = torch.empty(shape, dtype=_torch_dtype(dtype), device=t.torch_device)
        return _Dest(x, x.data_ptr())
    if t.framework == "numpy":
        import numpy as np
        x = np.empty(shape, dtype=_numpy_dtype(dtype))
        return _Dest(x, x.ctypes.data)
    from ._arrays import DeviceArray
    x = DeviceArray.empty(shape, dtype, t.ordinal)
    return _Dest(x, x.ptr)


def _region(t: _Target, nbytes: int) -> _Dest:
    """One untyped allocation that views are cut from."""
    if t.framework == "pt":
        import torch
        x = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=t.torch_device)
        return _Dest(x, x.data_ptr())
    if t.framework == "numpy":
        import numpy as np
        x = np.empty(max(nbytes, 1), dtype=np.uint8)
        return _Dest(x, x.ctypes.data)
    x = DeviceBuffer(nbytes, t.ordinal)
    return _Dest(x, x.ptr)


def _view(t: _Target, region: Any, info: TensorInfo, base: int) -> Any:
    """The tensor `info` as a view into `region`, whose byte 0 is data-section offset `base`."""
    lo, hi = info.begin - base, info.end - base
    try:
        if t.framework == "pt":
            return region[lo:hi].view(_torch_dtype(info.dtype)).view(info.shape)
        if t.framework == "numpy":
            return region[lo:hi].view(_numpy_dtype(info.dtype)).reshape(info.shape)
    except (ValueError, OverflowError, RuntimeError) as e:  # a shape the framework cannot hold
        if isinstance(e, SafetensorError):
            raise
        raise SafetensorError(f"tensor {info.name!r}: cannot view as {info.dtype} {list(info.shape)}: {e}") from None
    from ._arrays import DeviceArray
    return DeviceArray(region, lo, info.shape, info.dtype)


def _settle_allocations(t: _Target) -> None:
    # The caching allocator may hand out memory that kernels queued on the current stream still
    # use; gpufile's IO is ordered on no stream of the caller, so let that work finish first.
    if t.framework == "pt" and t.cuda:
        import torch
        torch.cuda.current_stream(t.torch_device).synchronize()


def _settle_sources(tensors: Iterable[Any]) -> None:
    # Tensors produced by kernels still running must be complete before their bytes are read.
    seen = set()
    for x in tensors:
        dev = getattr(x, "device", None)
        if getattr(dev, "type", None) == "cuda" and dev not in seen:
            import torch
            torch.cuda.synchronize(dev)
            seen.add(dev)


# ---- IO ----------------------------------------------------------------------------------------

class _SessionOpening:
    """gpufile's session (its IO workers and their pinned staging: most of the fixed cost of a
    first load in a fresh process) opened on a thread of its own while the loader parses headers
    and allocates the destinations; otherwise the loader's first read opens it, and the load
    waits for that on top. wait() before the reads raises the open's failure: an open consumes
    the settings staged for it (set_setting, as cuFile's setters), so the reads must not open
    again with the defaults."""

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._failure: Optional[BaseException] = None
        if not driver_is_open():
            self._thread = threading.Thread(target=self._open, name="gpufile-open", daemon=True)
            self._thread.start()

    def _open(self) -> None:
        try:
            _open_session()
        except BaseException as e:  # noqa: BLE001 - raised by wait(), on the loader's thread
            self._failure = e

    def opened(self) -> bool:
        """True once the session is open (never blocks; a failed open is False: wait() raises
        it)."""
        if self._thread is not None and self._thread.is_alive():
            return False
        return self._failure is None

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure


class _EarlyReads:
    """A load's direct reads of local files, each started as soon as both its destination exists
    and gpufile's session is open, so that the reads of the first tensors overlap the allocation
    of the later ones instead of waiting for all of it (issue 13: a first load in a fresh process
    waits for the open, then for the reads). Reads added before the open ends are queued and
    started by the first add() after it, or by finish().

    The caller settles the pending GPU work of its stream before allocating anything
    (_settle_allocations): memory handed out afterwards is then free of queued kernels, as the
    reads require. Every read started ends before finish() or abort() returns."""

    def __init__(self, opening: "_SessionOpening") -> None:
        self._opening = opening
        self._files: Dict[str, File] = {}
        self._queued: List[Tuple[str, int, int, int, str]] = []
        self._reads = _InFlight()

    def add(self, path: str, ptr: int, nbytes: int, offset: int, what: str) -> None:
        self._queued.append((path, ptr, nbytes, offset, what))
        if self._opening.opened():
            self._start_queued()

    def _file(self, path: str) -> File:
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = File(path, "r")
        return f

    def _start_queued(self) -> None:
        queued, self._queued = self._queued, []
        for path, ptr, nbytes, offset, what in queued:
            _start_read(self._file(path), self._reads, ptr, nbytes, offset, what)

    def finish(self, rest: Sequence[_Plan]) -> None:
        """Starts what is queued, reads `rest` (remote objects' reads, scatters; a local file
        through the File its early reads opened), then waits for everything; raises the first
        failure once all ended. Closing `rest`'s remote sources is the caller's."""
        failure: Optional[BaseException] = None
        try:
            self._opening.wait()
            self._start_queued()
            _read_from([(src.remote if src.remote is not None else self._file(src.path), ios, scatters)
                        for src, ios, scatters in rest])
        except BaseException as e:  # noqa: BLE001 - raised once every read ended
            failure = e
        try:
            self.abort()
        except BaseException as e:  # noqa: BLE001
            failure = failure or e
        if failure is not None:
            raise failure

    def abort(self) -> None:
        """Starts nothing more, waits for the reads started and closes the files; raises the first
        read's failure."""
        self._queued = []
        try:
            self._reads.wait()
        finally:
            for f in self._files.values():
                f.close()
            self._files = {}


class _InFlight:
    """IO in flight; wait() checks every one and raises the first failure, after all ended."""

    def __init__(self):
        self._pending: List[Tuple[Any, int, str]] = []

    def add(self, future, nbytes: int, what: str) -> None:
        self._pending.append((future, nbytes, what))

    def __len__(self) -> int:
        return len(self._pending)

    def wait(self) -> None:
        first: Optional[BaseException] = None
        for future, nbytes, what in self._pending:
            failure = self._end(future, nbytes, what)
            if first is None:
                first = failure
        self._pending.clear()
        if first is not None:
            raise first

    def wait_oldest(self) -> None:
        """Waits for the IO started first; raises its failure (the others keep running)."""
        future, nbytes, what = self._pending.pop(0)
        failure = self._end(future, nbytes, what)
        if failure is not None:
            raise failure

    @staticmethod
    def _end(future, nbytes: int, what: str) -> Optional[BaseException]:
        try:
            got = future.result()
            if got != nbytes:  # only a read comes back short
                return _short_read(what, got, nbytes)
        except BaseException as e:  # noqa: BLE001 - every read must end before memory is let go
            return e
        return None


def _start_read(f: Union[File, RemoteFile], reads: _InFlight, ptr: int, nbytes: int, file_offset: int, what: str) -> None:
    if nbytes:
        reads.add(f.pread_ptr(ptr, nbytes, file_offset), nbytes, what)


def _runs(shape: Sequence[int], index: Sequence[Tuple[int, int]], itemsize: int):
    """The contiguous byte runs of a box `index` ((start, stop) per dimension) of a C-order array,
    as (source byte offset, length) in order. Trailing dimensions taken whole merge into one run.
    """
    ndim = len(shape)
    k = ndim  # dims k.. are taken whole
    while k > 0 and index[k - 1] == (0, shape[k - 1]):
        k -= 1
    strides = [itemsize] * (ndim + 1)
    for i in range(ndim - 1, -1, -1):
        strides[i] = strides[i + 1] * shape[i]
    if k == 0:
        yield 0, strides[0]
        return
    inner = strides[k]                       # bytes per element of dim k-1 (all of dims k..)
    run_len = (index[k - 1][1] - index[k - 1][0]) * inner
    if run_len == 0:
        return
    outer = [range(lo, hi) for lo, hi in index[:k - 1]]

    def walk(dim: int, base: int):
        if dim == k - 1:
            yield base + index[k - 1][0] * inner, run_len
            return
        for i in outer[dim]:
            yield from walk(dim + 1, base + i * strides[dim + 1])

    yield from walk(0, 0)


def _normalize_index(key: Any, shape: Tuple[int, ...]) -> Tuple[List[Tuple[int, int]], Tuple[int, ...]]:
    """Basic indexing (ints and step-1 slices) to a box, and the result's shape."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > len(shape):
        raise IndexError(f"too many indices for a {len(shape)}-dimensional tensor")
    box, out_shape = [], []
    for dim, n in enumerate(shape):
        k = key[dim] if dim < len(key) else slice(None)
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                raise SafetensorError("get_slice supports step 1 only")
            stop = max(start, stop)
            box.append((start, stop))
            out_shape.append(stop - start)
        elif isinstance(k, int) and not isinstance(k, bool):
            i = k + n if k < 0 else k
            if not 0 <= i < n:
                raise IndexError(f"index {k} is out of range for dimension {dim} of size {n}")
            box.append((i, i + 1))
        else:
            raise SafetensorError(f"unsupported index {k!r}: use ints and slices")
    return box, tuple(out_shape)


# ---- public API --------------------------------------------------------------------------------

class _Source(NamedTuple):
    path: str
    header: Header
    names: List[str]  # the tensors wanted from this file
    # A remote object stays open from its header to its data, so every read is of the version
    # the header came from (each GET carries the ETag of the open); None for local files.
    remote: Optional[RemoteFile] = None


def _sources(path: PathLike) -> List[_Source]:
    """One file, a model.safetensors.index.json, or a directory holding either; or the URL of
    a file or of an index (a URL ending in "/" is a directory: its index, else its
    model.safetensors, else, on s3://, every .safetensors object right under it)."""
    if _is_url(path):
        return _remote_sources(os.fspath(path))
    path = os.fspath(path)
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        single = os.path.join(path, "model.safetensors")
        if os.path.exists(index):
            path = index
        elif os.path.exists(single):
            path = single
        else:
            files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
            if not files:
                raise SafetensorError(f"no .safetensors files in {path}")
            return _sources_of([os.path.join(path, f) for f in files])
    if path.endswith(".json"):
        return _sources_of_index(path)
    return _sources_of([path])


def _sources_of(paths: Sequence[str]) -> List[_Source]:
    out = [_Source(p, h, list(h.tensors)) for p, h in ((p, read_header(p)) for p in paths)]
    _refuse_duplicates(out)
    return out


def _refuse_duplicates(sources: Sequence[_Source]) -> None:
    """Each tensor in one file only: a folder's files have no index to say which one holds it."""
    seen: Dict[str, str] = {}
    for src in sources:
        for name in src.names:
            if name in seen:
                raise SafetensorError(f"tensor {name!r} is in both {seen[name]} and {src.path}")
            seen[name] = src.path


def _weight_map(index: Any, where: str) -> Dict[str, List[str]]:
    """Shard file name -> the tensor names an index maps to it; shard names stay inside the
    index's directory."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise SafetensorError(f"{where}: no weight_map of tensor name -> file name")
    by_file: Dict[str, List[str]] = {}
    for name, file in weight_map.items():
        if os.path.isabs(file) or ".." in file.replace("\\", "/").split("/"):
            raise SafetensorError(f"{where}: shard path {file!r} leaves the checkpoint's directory")
        by_file.setdefault(file, []).append(name)
    return by_file


def _check_shard(p: str, h: Header, names: List[str]) -> None:
    missing = [n for n in names if n not in h.tensors]
    if missing:
        raise SafetensorError(f"{p} lacks {len(missing)} tensor(s) the index maps to it, e.g. {missing[0]!r}")


def _sources_of_index(index_path: str) -> List[_Source]:
    with open(index_path, "rb") as f:
        try:
            index = json.load(f)
        except (ValueError, RecursionError) as e:
            raise SafetensorError(f"{index_path}: not valid JSON: {e}") from None
    base = os.path.dirname(os.path.abspath(index_path))
    out = []
    for file, names in _weight_map(index, index_path).items():
        p = os.path.join(base, file)
        h = read_header(p)
        _check_shard(p, h, names)
        out.append(_Source(p, h, names))
    return out


# ---- remote checkpoints (s3://, http(s)://) ---------------------------------------------------

def _remote_sources(url: str) -> List[_Source]:
    if url.endswith("/"):  # a folder: its index, else its model.safetensors, else (s3://) all
        try:
            index = RemoteFile(url + "model.safetensors.index.json")
        except FileNotFoundError:
            pass
        else:
            return _remote_index_sources(index)
        try:
            single = RemoteFile(url + "model.safetensors")
        except FileNotFoundError:
            if not url.lower().startswith("s3://"):  # an http(s):// folder cannot be listed
                raise
            return _remote_folder_sources(url)
        return [_remote_source(url + "model.safetensors", single, None)]
    if url.endswith(".json"):
        return _remote_index_sources(RemoteFile(url))
    return [_remote_source(url, RemoteFile(url), None)]


def _remote_folder_sources(url: str) -> List[_Source]:
    """Every .safetensors object right under an s3:// folder with neither an index nor a
    model.safetensors, as a local folder's files are taken: in name order, each tensor in one."""
    from ._s3 import list_all
    bucket, _, prefix = url[len("s3://"):].partition("/")
    keys, _ = list_all("s3://" + bucket, prefix, "/")
    names = sorted(k[len(prefix):] for k in keys if k.endswith(".safetensors"))
    if not names:
        raise SafetensorError(f"no .safetensors objects in {url}")
    out: List[_Source] = []
    try:
        for name in names:
            out.append(_remote_source(url + name, RemoteFile(url + name), None))
        _refuse_duplicates(out)
    except BaseException:
        _close_sources(out)
        raise
    return out


def _remote_source(url: str, f: RemoteFile, names: Optional[List[str]]) -> _Source:
    try:
        h = _remote_header(f)
        if names is not None:
            _check_shard(url, h, names)
    except BaseException:
        f.close()
        raise
    return _Source(url, h, list(h.tensors) if names is None else names, f)


def _shard_url(index_url: str, file: str) -> str:
    """The URL of a shard named relative to its index. http(s):// paths are percent-encoded here;
    s3:// keys are sent as given (gpufile encodes them)."""
    base = index_url[:index_url.rindex("/") + 1]
    if index_url.lower().startswith("s3://"):
        return base + file
    from urllib.parse import quote
    return base + quote(file, safe="/")


def _remote_index_sources(index: RemoteFile) -> List[_Source]:
    index_url = index.name
    with index as f:
        size = f.size()
        if size > MAX_HEADER_SIZE:
            raise SafetensorError(f"{index_url}: {size} bytes is too large for an index")
        raw = _read_exactly(f, size, 0)
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise SafetensorError(f"{index_url}: not valid JSON: {e}") from None
    out: List[_Source] = []
    try:
        for file, names in _weight_map(parsed, index_url).items():
            p = _shard_url(index_url, file)
            out.append(_remote_source(p, RemoteFile(p), names))
    except BaseException:
        _close_sources(out)
        raise
    return out


def _close_sources(sources: Iterable[_Source]) -> None:
    for src in sources:
        if src.remote is not None:
            src.remote.close()


def _remote_reads_in_flight() -> int:
    """Remote reads are Futures on the remote pool (docs/remote.md), each with up to
    remote_concurrency GETs in flight: this many at once keeps the connections busy without
    queueing a Future per tensor."""
    from . import settings
    return max(2, min(16, int(settings().get("gpufile.remote_concurrency", 16))))


def _read_all(plans: Sequence[_Plan]) -> None:
    """Opens the local files of `plans` and runs every read at once (_read_from); remote sources
    read through their open RemoteFile, and are closed here."""
    files: List[File] = []
    try:
        jobs = []
        for src, ios, scatters in plans:
            if src.remote is not None:
                jobs.append((src.remote, ios, scatters))
                continue
            f = File(src.path, "r")
            files.append(f)
            jobs.append((f, ios, scatters))
        _read_from(jobs)
    finally:
        for f in files:
            f.close()
        _close_sources(src for src, _ios, _scatters in plans)


def _read_from(jobs: Sequence[Tuple[Union[File, RemoteFile], Sequence[Tuple[int, int, int, str]],
                                    Sequence[_scatter.Scatter]]]) -> None:
    """Runs every read of `jobs` ((open file, direct reads, scatters) each) at once, all files
    together, and returns once all ended and every scatter's runs landed; raises the first
    failure, after all that. Direct reads of remote objects go a bounded number at a time
    (_read_remote). The caller has settled the destinations' pending GPU work first
    (_settle_allocations / _settle_sources)."""
    reads = _InFlight()
    finishes: List[Callable[[], None]] = [reads.wait]
    spans = None
    every_scatter = [s for _f, _ios, scatters in jobs for s in scatters]
    if every_scatter:  # only parts of tensors are scattered: a plain load_file never imports _scatter
        from . import _scatter
        spans = _scatter.Spans(every_scatter, _short_read)
        finishes.insert(0, spans.finish)
    remote = [(f, io) for f, ios, _s in jobs if isinstance(f, RemoteFile) for io in ios]
    failure: Optional[BaseException] = None
    try:
        for f, ios, _scatters in jobs:
            if not isinstance(f, RemoteFile):
                for ptr, nbytes, offset, what in ios:
                    _start_read(f, reads, ptr, nbytes, offset, what)
        if spans is not None:  # the direct reads run while the span reads wait for staging slots
            for f, _ios, scatters in jobs:
                for s in scatters:
                    spans.read(f, s)
        _read_remote(remote, _remote_reads_in_flight())
    except BaseException as e:  # noqa: BLE001 - raised once every read ended
        failure = e
    for finish in finishes:  # every read ends (or fails) before anything is let go
        try:
            finish()
        except BaseException as e:  # noqa: BLE001
            failure = failure or e
    if failure is not None:
        raise failure


def _short_read(what: str, got: int, nbytes: int) -> SafetensorError:
    return SafetensorError(f"{what}: the file ended after {got} of {nbytes} bytes (truncated while loading?)")


def _read_remote(ios: Sequence[Tuple[RemoteFile, Tuple[int, int, int, str]]], most: int) -> None:
    """Reads `ios` with at most `most` in flight; after a failure starts no more, waits for the
    reads already running and raises the first failure."""
    window = _InFlight()
    try:
        for f, (ptr, nbytes, offset, what) in ios:
            if len(window) >= most:
                window.wait_oldest()
            _start_read(f, window, ptr, nbytes, offset, what)
    except BaseException:
        try:
            window.wait()  # the reads still running end before the failure is raised
        except BaseException:  # noqa: BLE001 - the first failure is the one raised
            pass
        raise
    window.wait()


def _box_reads(dest_ptr: int, info: TensorInfo, box: Sequence[Tuple[int, int]], data_start: int,
               what: str) -> List[Tuple[int, int, int, str]]:
    """The reads that fill a C-order array at dest_ptr with the part `box` of tensor `info`."""
    ios, at = [], 0
    for src, length in _runs(info.shape, box, _dtypes.BY_NAME[info.dtype].itemsize):
        ios.append((dest_ptr + at, length, data_start + info.begin + src, what))
        at += length
    return ios


def _box_plan(dest_ptr: int, device: Optional[int], info: TensorInfo, box: Sequence[Tuple[int, int]],
              data_start: int, what: str) -> Tuple[List[Tuple[int, int, int, str]], List[_scatter.Scatter]]:
    """The reads that fill a C-order array at dest_ptr, in the memory of `device` (a CUDA device
    number, _scatter.HOST, or None where unknown), with the part `box` of tensor `info`: one read
    per run, or, where the runs are many and short (a part split along a later dimension), the
    span of whole rows read once and scattered (_scatter)."""
    from . import _scatter
    from ._boxes import Piece, place
    itemsize = _dtypes.BY_NAME[info.dtype].itemsize
    p = place(Piece((0,) * len(info.shape), info.shape, None), [lo for lo, _ in box], [hi for _, hi in box],
              itemsize)
    if (p is None or device is None or not _scatter.through_span(p)
            or (device == _scatter.HOST and not _scatter.host_scatter_available())):
        return _box_reads(dest_ptr, info, box, data_start, what), []
    base = data_start + info.begin
    ios: List[Tuple[int, int, int, str]] = []
    scatters: List[_scatter.Scatter] = []
    for q in _scatter.pieces(p):
        if _scatter.through_span(q):
            scatters.append(_scatter.Scatter(dest_ptr, device, base, q, what))
        else:
            ios.extend((dest_ptr + at, n, base + src, what) for at, n, src in _scatter.direct_reads(q))
    return ios, scatters


def _device_number(t: _Target) -> int:
    from ._scatter import HOST
    return t.ordinal if t.cuda else HOST


def load_file(filename: PathLike, device: Any = "cpu", *, framework: str = "pt",
              views: bool = False) -> Dict[str, Any]:
    """Loads every tensor of a checkpoint into `device`.

    `filename` is a .safetensors file, a model.safetensors.index.json (sharded checkpoints: every
    shard is read at once) or a directory holding either. Returns {name: tensor}. With
    ``views=True`` each file's tensors are views into one allocation of its data section.
    """
    t = _target(framework, device)
    result: Dict[str, Any] = {}
    _load(t, filename, lambda src, read: _load_whole(t, src, views, result, read))
    return result


def _load(t: _Target, filename: PathLike,
          fill: Callable[[_Source, Callable[[int, int, int, str], None]], List[_scatter.Scatter]]) -> None:
    """The frame of load_file and load_sharded. For each source of `filename`, `fill(src, read)`
    allocates the destinations of its tensors, hands each direct read to `read(ptr, nbytes,
    offset, what)` and returns its scatters. A local file's direct reads start as soon as the
    session is open (_EarlyReads); remote objects and scatters are read after the last
    allocation. Every read has ended when this returns or raises."""
    _settle_allocations(t)  # before allocating: _EarlyReads starts reads between allocations
    early = _EarlyReads(_SessionOpening())
    rest: List[_Plan] = []
    sources: List[_Source] = []
    try:
        try:
            sources = _sources(filename)
            for src in sources:
                ios: List[Tuple[int, int, int, str]] = []
                if src.remote is None:
                    scatters = fill(src, functools.partial(early.add, src.path))
                else:
                    scatters = fill(src, lambda *io, ios=ios: ios.append(io))
                if ios or scatters:
                    rest.append((src, ios, scatters))
        except BaseException:
            try:
                early.abort()  # the reads started end before the failure is raised
            except BaseException:  # noqa: BLE001 - the first failure is the one raised
                pass
            raise
        early.finish(rest)
    finally:
        _close_sources(sources)


def _load_whole(t: _Target, src: _Source, views: bool, result: Dict[str, Any],
                read: Callable[[int, int, int, str], None]) -> List[_scatter.Scatter]:
    """load_file's part of _load: every tensor of `src` whole, each in its own allocation or (with
    `views`) a view into one allocation of the file's data section."""
    h = src.header
    if views:
        lo = min((h.tensors[n].begin for n in src.names), default=0)
        hi = max((h.tensors[n].end for n in src.names), default=0)
        region = _region(t, hi - lo)
        for n in src.names:
            result[n] = _view(t, region.obj, h.tensors[n], lo)
        read(region.ptr, hi - lo, h.data_start + lo, src.path)
        return []
    for n in src.names:
        info = h.tensors[n]
        dest = _allocate(t, info.dtype, info.shape)
        result[n] = dest.obj
        read(dest.ptr, info.nbytes, h.data_start + info.begin, f"{src.path}: {n}")
    return []


SplitRule = Union[Mapping[str, Optional[int]], Callable[[str, Tuple[int, ...]], Optional[int]]]


def load_sharded(filename: PathLike, device: Any, split: SplitRule, *, rank: Optional[int] = None,
                 world_size: Optional[int] = None, process_group: Any = None,
                 replicated: str = "read", framework: str = "pt") -> Dict[str, Any]:
    """Tensor-parallel loading: each rank gets its own part of every split tensor.

    `split` says, per tensor, the dimension it is split along (0: rows, 1: columns, ...) or None
    for a tensor every rank holds whole; a mapping (missing names: None) or a function of (name,
    shape). Parts follow torch.tensor_split / numpy.array_split (the first size % world_size parts
    one larger). Each rank reads only the bytes of its part. Rank and world size come from
    `process_group` (torch.distributed; the default group if initialised) unless given.

    `replicated`: "read" (every rank reads whole tensors itself; best when the file is in the page
    cache or on fast storage) or "broadcast" (the group's first rank reads them once and
    broadcasts them; best when storage is the bottleneck and the ranks are linked by NVLink).
    """
    if replicated not in ("read", "broadcast"):
        raise SafetensorError(f"replicated must be 'read' or 'broadcast', not {replicated!r}")
    rank, world_size, dist = _ranks(rank, world_size, process_group, replicated)
    rule = _split_rule(split)
    t = _target(framework, device)
    result: Dict[str, Any] = {}
    to_broadcast: List[str] = []

    def fill(src: _Source, read: Callable[[int, int, int, str], None]) -> List[_scatter.Scatter]:
        h, scatters = src.header, []
        for n in src.names:
            info = h.tensors[n]
            dim = rule(n, info.shape)
            if dim is None:
                dest = _allocate(t, info.dtype, info.shape)
                result[n] = dest.obj
                if replicated == "broadcast":
                    to_broadcast.append(n)
                    if rank != 0:
                        continue
                read(dest.ptr, info.nbytes, h.data_start + info.begin, f"{src.path}: {n}")
                continue
            box, shape = _part(info, dim, rank, world_size)
            dest = _allocate(t, info.dtype, shape)
            result[n] = dest.obj
            direct, scattered = _box_plan(dest.ptr, _device_number(t), info, box, h.data_start, f"{src.path}: {n}")
            for io in direct:
                read(*io)
            scatters.extend(scattered)
        return scatters

    _load(t, filename, fill)
    if to_broadcast:
        src_rank = dist.get_global_rank(process_group, 0) if process_group is not None else 0
        for n in to_broadcast:
            dist.broadcast(result[n], src=src_rank, group=process_group)
    return result


class LoadResult(NamedTuple):
    """What load_into left alone, named as torch's load_state_dict names them."""
    missing_keys: List[str]     # names in `tensors` the checkpoint does not have (left untouched)
    unexpected_keys: List[str]  # tensors of the checkpoint that `tensors` has no place for


def load_into(tensors: Mapping[str, Any], filename: PathLike, *, strict: bool = True,
              split: Optional[SplitRule] = None, rank: Optional[int] = None,
              world_size: Optional[int] = None, process_group: Any = None) -> LoadResult:
    """Reads a checkpoint's tensors straight into existing memory, with no allocation.

    `tensors` maps names to the tensors to fill (a model's ``state_dict()``, say): torch tensors
    on any device, NumPy arrays, CuPy (any ``__cuda_array_interface__``) arrays or
    gpufile.DeviceArray; C-contiguous and writable. Each one's dtype and shape must be the
    checkpoint's; everything is checked before the first byte is read, so a mismatch leaves every
    tensor as it was. All reads run at once, and every one has ended when this returns or raises.

    With `strict` (the default) the names must match exactly, else SafetensorError lists the
    missing and unexpected ones; without it the names both sides have are filled and the others
    returned in the LoadResult. Tensor parallelism: with `split` (as in load_sharded) the
    destinations are this rank's parts, and only their bytes are read. Destinations that are the
    same memory (tied weights) are filled once, from the first of them in the checkpoint.

    GPU work still queued on torch's current streams is waited for before the reads start; other
    frameworks' (CuPy's streams) must be finished by the caller.
    """
    if not isinstance(tensors, Mapping):
        raise SafetensorError("tensors must be a mapping of name -> tensor")
    rule: Optional[Callable[[str, Tuple[int, ...]], Optional[int]]] = None
    my_rank, parts = 0, 1
    if split is not None:
        my_rank, parts, _ = _ranks(rank, world_size, process_group, "read")
        rule = _split_rule(split)
    opening = _SessionOpening()
    sources = _sources(filename)
    in_checkpoint = {n for src in sources for n in src.names}
    missing = [n for n in tensors if n not in in_checkpoint]
    unexpected = [n for src in sources for n in src.names if n not in tensors]
    if strict and (missing or unexpected):
        raise SafetensorError(f"{os.fspath(filename)} does not match the tensors given: "
                              f"missing {_few(missing)}, unexpected {_few(unexpected)}")
    plans, filled = [], _Filled()
    for src in sources:
        h, ios, scatters = src.header, [], []
        for n in src.names:
            if n not in tensors:
                continue
            info = h.tensors[n]
            dest = _describe_tensor(n, tensors[n], into=True)
            dim = rule(n, info.shape) if rule is not None else None
            if dim is None:
                box, shape, part = [(0, k) for k in info.shape], info.shape, "tensor"
            else:
                box, shape = _part(info, dim, my_rank, parts)
                part = f"rank {my_rank}'s part (dimension {dim} split {parts} ways) of tensor"
            if dest.dtype != info.dtype:
                raise SafetensorError(f"tensor {n!r}: the checkpoint holds {info.dtype}, the destination is {dest.dtype}")
            if tuple(dest.shape) != tuple(shape):
                raise SafetensorError(f"{part} {n!r} has shape {list(shape)} in the checkpoint, "
                                      f"the destination has {list(dest.shape)}")
            if filled.add(n, dest):
                device = _device_of(dest.obj) if dim is not None else None  # whole tensors: one run
                direct, scattered = _box_plan(dest.ptr, device, info, box, h.data_start, f"{src.path}: {n}")
                ios.extend(direct)
                scatters.extend(scattered)
        plans.append((src, ios, scatters))
    filled.check_overlaps()
    _settle_sources(filled.objects)
    opening.wait()
    _read_all(plans)
    return LoadResult(missing, unexpected)


def _device_of(x: Any) -> Optional[int]:
    """The CUDA device number of a destination's memory, _scatter.HOST for host memory, None
    where that is not known (its part is then read run by run)."""
    from . import _scatter
    from ._arrays import DeviceArray
    mod = type(x).__module__
    if mod.startswith("torch"):
        if x.device.type == "cpu":
            return _scatter.HOST
        return x.device.index if x.device.type == "cuda" and x.device.index is not None else None
    if mod.startswith("numpy"):
        return _scatter.HOST
    if isinstance(x, DeviceArray):
        return x.device
    try:  # __cuda_array_interface__ memory: ask the driver where it is
        from ._gpufile import _memory_of
        return int(_memory_of(x)[2])
    except Exception:  # noqa: BLE001 - an object the driver cannot place keeps the plain path
        return None


def _few(names: Sequence[str], most: int = 8) -> str:
    if not names:
        return "none"
    shown = ", ".join(repr(n) for n in names[:most])
    return f"{len(names)} ({shown}{', ...' if len(names) > most else ''})"


class _Filled:
    """The destination memory of one load_into: the same memory twice is filled once; parts of
    one memory given twice (overlapping but not equal) are refused, their reads would race."""

    def __init__(self):
        self._ranges: Dict[Tuple[int, int], str] = {}
        self.objects: List[Any] = []

    def add(self, name: str, dest: _Outgoing) -> bool:
        if dest.nbytes == 0:
            return False
        key = (dest.ptr, dest.nbytes)
        if key in self._ranges:
            return False
        self._ranges[key] = name
        self.objects.append(dest.obj)
        return True

    def check_overlaps(self) -> None:
        end, last = 0, None
        for (ptr, nbytes), name in sorted(self._ranges.items()):
            if last is not None and ptr < end:
                raise SafetensorError(f"tensors {last!r} and {name!r} overlap in memory: cannot fill both")
            if ptr + nbytes > end:
                end, last = ptr + nbytes, name


def _part(info: TensorInfo, dim: int, rank: int, world_size: int) -> Tuple[List[Tuple[int, int]], Tuple[int, ...]]:
    """The box of `rank`'s part of tensor `info` split along `dim`, and the part's shape."""
    if not (isinstance(dim, int) and 0 <= dim < len(info.shape)):
        raise SafetensorError(f"tensor {info.name!r} of shape {info.shape} has no dimension {dim} to split")
    return _normalize_index(shard_slice(info.shape, dim, rank, world_size), info.shape)


def _split_rule(split: SplitRule) -> Callable[[str, Tuple[int, ...]], Optional[int]]:
    if callable(split):
        return split
    by_name: Mapping[str, Optional[int]] = split

    def rule(name: str, shape: Tuple[int, ...]) -> Optional[int]:
        return by_name.get(name)
    return rule


def _ranks(rank, world_size, process_group, replicated):
    """(rank, world size, torch.distributed or None) from the arguments or the process group."""
    dist = None
    if rank is None or world_size is None or replicated == "broadcast":
        import torch.distributed as dist
        if not dist.is_initialized():
            raise SafetensorError("no rank/world_size given and torch.distributed is not initialised")
        if rank is None:
            rank = dist.get_rank(process_group)
        if world_size is None:
            world_size = dist.get_world_size(process_group)
    if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
        raise SafetensorError(f"bad rank {rank!r} / world_size {world_size!r}")
    return rank, world_size, dist


# ---- writing -----------------------------------------------------------------------------------

class _Outgoing(NamedTuple):
    dtype: str
    shape: Tuple[int, ...]
    ptr: int
    nbytes: int
    obj: Any


def _describe_tensor(name: str, x: Any, into: bool = False) -> _Outgoing:
    """The memory of a tensor to save, or with ``into=True`` of one to load into (which must be
    writable). Only C-contiguous memory: one tensor is one run of bytes in the file."""
    from ._arrays import DeviceArray
    what = "load into" if into else "save"
    mod = type(x).__module__
    try:
        if mod.startswith("torch"):
            if not x.is_contiguous():
                raise SafetensorError(f"tensor {name!r} is not contiguous: cannot {what} it in place "
                                      "(use a contiguous tensor, or .contiguous() and copy)")
            d = _dtypes.from_torch(x.dtype)
            return _Outgoing(d.name, tuple(x.shape), x.data_ptr(), x.numel() * d.itemsize, x)
        if mod.startswith("numpy"):
            if not x.flags["C_CONTIGUOUS"]:
                raise SafetensorError(f"array {name!r} is not C-contiguous: cannot {what} it in place "
                                      "(use numpy.ascontiguousarray)")
            if into and not x.flags["WRITEABLE"]:
                raise SafetensorError(f"array {name!r} is read-only")
            d = _dtypes.from_numpy(x.dtype)
            return _Outgoing(d.name, tuple(x.shape), x.ctypes.data, x.nbytes, x)
    except ValueError as e:  # a dtype safetensors has no name for
        if isinstance(e, SafetensorError):
            raise
        raise SafetensorError(f"tensor {name!r}: {e}") from None
    if isinstance(x, DeviceArray):
        return _Outgoing(x.dtype, x.shape, x.ptr, x.nbytes, x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if into and isinstance(cai, dict):  # CuPy, Numba, ...
        return _describe_cuda_array(name, x, cai)
    kinds = "torch tensors, NumPy or CuPy arrays" if into else "torch tensors, NumPy arrays"
    raise SafetensorError(f"tensor {name!r}: cannot {what} a {type(x).__name__}; pass {kinds} "
                          "or gpufile.DeviceArray")


def _describe_cuda_array(name: str, x: Any, cai: Mapping[str, Any]) -> _Outgoing:
    d = next((r for r in _dtypes.BY_NAME.values() if r.typestr == cai.get("typestr")), None)
    if d is None:
        raise SafetensorError(f"tensor {name!r}: element type {cai.get('typestr')!r} has no safetensors equivalent")
    shape = tuple(int(n) for n in cai["shape"])
    ptr, readonly = cai["data"]
    if readonly:
        raise SafetensorError(f"array {name!r} is read-only")
    strides = cai.get("strides")
    if strides is not None:
        expect, want = d.itemsize, []
        for n in reversed(shape):
            want.append(expect)
            expect *= n
        if any(n > 1 and s != w for n, s, w in zip(shape, strides, reversed(want))):
            raise SafetensorError(f"array {name!r} is not C-contiguous: cannot load into it in place")
    count = 1
    for n in shape:
        count *= n
    return _Outgoing(d.name, shape, int(ptr or 0), count * d.itemsize, x)


def _layout(entries: Mapping[str, _Outgoing], metadata: Optional[Mapping[str, str]]) -> Tuple[bytes, List[Tuple[str, int]]]:
    """The header bytes and each tensor's data offset, in the safetensors package's order
    (larger dtypes first, then by name), so that both write the same bytes."""
    rank = {name: i for i, name in enumerate(_dtypes.BY_NAME)}
    order = sorted(entries, key=lambda n: (-rank[entries[n].dtype], n))
    header: Dict[str, Any] = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    at, offsets = 0, []
    for n in order:
        e = entries[n]
        header[n] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [at, at + e.nbytes]}
        offsets.append((n, at))
        at += e.nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % _ALIGNMENT)
    return struct.pack("<Q", len(raw)) + raw, offsets


def save_file(tensors: Mapping[str, Any], filename: PathLike,
              metadata: Optional[Mapping[str, str]] = None, *, fsync: bool = False) -> None:
    """Writes tensors (torch on any device, NumPy, gpufile.DeviceArray) as a safetensors file.

    GPU tensors are written from GPU memory through gpufile's pipelined write path, without a
    copy to a host tensor first. With ``fsync=True`` the data is on storage when this returns.
    """
    if not isinstance(tensors, Mapping):
        raise SafetensorError("tensors must be a mapping of name -> tensor")
    entries = {}
    for name, x in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorError(f"invalid tensor name {name!r}")
        entries[name] = _describe_tensor(name, x)
    head, offsets = _layout(entries, metadata)
    _settle_sources(tensors.values())
    with File(os.fspath(filename), "w") as f:
        writes = _InFlight()
        try:
            writes.add(f.pwrite(head), len(head), "header")
            for name, at in offsets:
                e = entries[name]
                if e.nbytes:
                    writes.add(f.pwrite_ptr(e.ptr, e.nbytes, len(head) + at), e.nbytes, name)
        finally:
            writes.wait()
        if fsync:
            os.fsync(f.fileno())


# ---- lazy access ---------------------------------------------------------------------------------

class _Slice:
    """A tensor of an open file, read only in the part that is indexed."""

    def __init__(self, owner: "safe_open", info: TensorInfo):
        self._owner, self._info = owner, info

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        return self._info.dtype

    def __getitem__(self, key: Any) -> Any:
        box, shape = _normalize_index(key, self._info.shape)
        return self._owner._read_box(self._info, box, shape)


class safe_open:
    """Lazy access to one safetensors file, as the safetensors package's safe_open:

        with safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
            for name in f.keys():
                t = f.get_tensor(name)
            rows = f.get_slice("embed.weight")[1000:2000]   # reads just those rows
    """

    def __init__(self, filename: PathLike, framework: str = "pt", device: Any = "cpu"):
        self._path = os.fspath(filename)
        self._target = _target(framework, device)
        self._file: Optional[Union[File, RemoteFile]] = None
        if _is_url(self._path):  # the header and every slice read of the version opened here
            src = _remote_source(self._path, RemoteFile(self._path), None)
            self._header, self._file = src.header, src.remote
        else:
            self._header = read_header(self._path)
            self._file = File(self._path, "r")

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def keys(self) -> List[str]:
        return list(self._header.tensors)

    def offset_keys(self) -> List[str]:
        return self.keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        return None if self._header.metadata is None else dict(self._header.metadata)

    def _info(self, name: str) -> TensorInfo:
        info = self._header.tensors.get(name)
        if info is None:
            raise SafetensorError(f"no tensor named {name!r} in {self._path}")
        return info

    def get_tensor(self, name: str) -> Any:
        info = self._info(name)
        return self._read_box(info, [(0, n) for n in info.shape], info.shape)

    def get_slice(self, name: str) -> _Slice:
        return _Slice(self, self._info(name))

    def _read_box(self, info: TensorInfo, box: List[Tuple[int, int]], shape: Tuple[int, ...]) -> Any:
        if self._file is None:
            raise SafetensorError("the file is closed")
        dest = _allocate(self._target, info.dtype, shape)
        _settle_allocations(self._target)
        ios, scatters = _box_plan(dest.ptr, _device_number(self._target), info, box,
                                  self._header.data_start, info.name)
        _read_from([(self._file, ios, scatters)])
        return dest.obj


def shard_slice(shape: Sequence[int], dim: int, rank: int, world_size: int) -> Tuple[slice, ...]:
    """The index of `rank`'s part when a tensor is split into `world_size` parts along `dim`
    (the first size % world_size parts one larger, as numpy.array_split and torch.tensor_split)."""
    n = shape[dim]
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return tuple(slice(start, stop) if i == dim else slice(None) for i in range(len(shape)))
