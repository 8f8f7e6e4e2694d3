"""Where the part of a stored block that a box selects lands in a C-ordered array of the box: as
runs of bytes contiguous both in the block and in the array, placed by strides on each side.

Shared by gpufile.hdf5.read (a dataset's chunks) and gpufile.safetensors (a rank's part of a
tensor, which is one block). Pure arithmetic: no IO, no NumPy.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional, Sequence, Tuple


class Piece(NamedTuple):
    """A stored block: its first element's coordinates, its shape, where its bytes are in the file
    (None for a block never written)."""
    origin: Tuple[int, ...]
    shape: Tuple[int, ...]
    file_offset: Optional[int]


class Placement(NamedTuple):
    """Where a piece's selected part goes: runs of `run` bytes, `counts` of them along the outer
    dimensions, at byte offsets src_offset + sum(i * src_strides) inside the piece and
    dst_offset + sum(i * dst_strides) inside `out`."""
    run: int
    counts: Tuple[int, ...]
    src_offset: int
    src_strides: Tuple[int, ...]
    dst_offset: int
    dst_strides: Tuple[int, ...]

    @property
    def rows(self) -> int:
        return math.prod(self.counts)

    def src_span(self) -> int:
        """Bytes from the first run's start to the last run's end in the piece."""
        return sum((n - 1) * s for n, s in zip(self.counts, self.src_strides)) + self.run

    def dst_end(self) -> int:
        return self.dst_offset + sum((n - 1) * s for n, s in zip(self.counts, self.dst_strides)) \
            + self.run



@functools.lru_cache(maxsize=64)  # every piece of a dataset asks for the same few
def _c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def place(piece: Piece, start: Sequence[int], stop: Sequence[int], itemsize: int
          ) -> Optional[Placement]:
    """How the part of `piece` inside the box [start, stop) lands in a C-ordered array of the
    box; None when they do not meet. Dimensions that both sides hold whole are merged into the
    run, so a chunk that spans whole trailing dimensions lands as one run."""
    lo, extent = [], []
    for o, c, a, b in zip(piece.origin, piece.shape, start, stop):
        first, end = max(o, a), min(o + c, b)
        if end <= first:
            return None
        lo.append(first)
        extent.append(end - first)
    box = tuple(b - a for a, b in zip(start, stop))
    run, counts, src_outer, dst_outer, src_strides, dst_strides = _layout(
        tuple(extent), piece.shape, box, itemsize)
    src_offset = sum((l - o) * s for l, o, s in zip(lo, piece.origin, src_strides))
    dst_offset = sum((l - a) * s for l, a, s in zip(lo, start, dst_strides))
    return Placement(run, counts, src_offset, src_outer, dst_offset, dst_outer)


@functools.lru_cache(maxsize=256)  # the pieces of a read share a few extents (inside, at edges)
def _layout(extent: Tuple[int, ...], shape: Tuple[int, ...], box: Tuple[int, ...], itemsize: int):
    """(run, counts, src and dst strides of the outer dimensions, all src and dst strides) of
    an `extent` of a block of `shape` landing in an array of shape `box`."""
    src_strides = _c_strides(shape, itemsize)
    dst_strides = _c_strides(box, itemsize)
    k = len(extent) - 1
    while k > 0 and extent[k] == shape[k] == box[k]:
        k -= 1
    run = itemsize * math.prod(extent[k:])
    # Outer dimensions of one index add nothing: dropped, so one run has no outer dimension.
    outer = [d for d in range(k) if extent[d] > 1]
    return (run, tuple(extent[d] for d in outer), tuple(src_strides[d] for d in outer),
            tuple(dst_strides[d] for d in outer), src_strides, dst_strides)


def split(p: Placement, limit: int):
    """`p` as placements whose runs each span at most `limit` bytes of the piece (or one run),
    cut along the outer dimensions: a narrow selection of a large contiguous dataset must not
    stage the whole dataset."""
    if p.src_span() <= limit or not p.counts:
        yield p
        return
    inner = p._replace(counts=p.counts[1:], src_strides=p.src_strides[1:],
                       dst_strides=p.dst_strides[1:])
    per = (limit - inner.src_span()) // p.src_strides[0] + 1 if inner.src_span() <= limit else 1
    for i in range(0, p.counts[0], per):
        rows = min(per, p.counts[0] - i)
        src_offset = p.src_offset + i * p.src_strides[0]
        dst_offset = p.dst_offset + i * p.dst_strides[0]
        if rows == 1:
            yield from split(inner._replace(src_offset=src_offset, dst_offset=dst_offset), limit)
        else:
            yield p._replace(counts=(rows,) + p.counts[1:], src_offset=src_offset, dst_offset=dst_offset)
