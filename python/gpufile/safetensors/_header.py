"""The safetensors header: its format (an 8-byte little-endian length, then a JSON object of
dtype, shape and data offsets per tensor), the checks that refuse what the format does not
allow, and reading it from a local file or a remote object with a few small reads. Everything
else in gpufile.safetensors builds on these types; this module imports none of its siblings."""
from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, NamedTuple, Optional, Tuple, Union

from .. import _dtypes
from .._gpufile import RemoteFile, _redact_text


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
