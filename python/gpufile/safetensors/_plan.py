"""Read planning: which reads fill a destination with a box (a start and stop per dimension) of
a tensor in the file. A whole tensor is one read; a part is one read per contiguous run, or,
where the runs are many and short, whole rows read once and scattered (_scatter, imported only
when a part is planned). Pure arithmetic over offsets: no IO here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from .. import _dtypes
from ._header import SafetensorError, TensorInfo

if TYPE_CHECKING:
    from .. import _scatter


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
    from .. import _scatter
    from .._boxes import Piece, place
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
