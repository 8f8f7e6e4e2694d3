"""gpufile.hdf5.read: an h5py dataset's bytes from its file into GPU or host memory through
gpufile's IO, HDF5 not in the data path (docs/hdf5.md, "Reading datasets straight into memory").

A dataset is stored as pieces: one for a contiguous dataset, one full chunk-shaped block per
written chunk (C order, edge chunks too) for a chunked one. Each piece that meets the selection
lands in ``out`` as runs of bytes that are contiguous both in the file and in ``out``:

- one run: read straight into its place;
- several long runs: one read per run, straight into its place;
- several short runs: the piece's bytes read into a staging buffer in the same kind of memory as
  ``out`` (device staging for a GPU array), then placed with one strided copy (pitched
  device-to-device copies for GPU memory, so nothing goes through host memory).

Many reads are in flight at once (gpufile's futures); a chunk never written gets the dataset's
fill value, as HDF5 gives it.
"""
from __future__ import annotations

import ctypes
import itertools
import math
from collections import deque
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ._boxes import Piece, Placement, place, split

# Runs at least this long are read straight into their place; shorter ones go through staging.
DIRECT_RUN_BYTES = 256 << 10
# Staging held at once, and reads in flight at once.
STAGING_BYTES = 128 << 20
MAX_IN_FLIGHT = 64
# The largest block of fill value kept in GPU memory to copy from.
FILL_BLOCK_BYTES = 4 << 20


# ---- the dataset's storage ----------------------------------------------------------------------

def _filter_names(dcpl) -> List[str]:
    names = []
    for i in range(dcpl.get_nfilters()):
        code, _flags, _values, name = dcpl.get_filter(i)
        names.append(f"{name.decode(errors='replace') or 'unnamed'} (filter {code})")
    return names


def storage(dset, start: Optional[Sequence[int]] = None, stop: Optional[Sequence[int]] = None
            ) -> Tuple[Tuple[int, ...], List[Piece]]:
    """The dataset's block shape and its pieces that meet the box [start, stop) (default: the
    whole dataset), in C order; refuses what cannot be read as bytes."""
    import h5py  # type: ignore[import-untyped]  # h5py ships no type information
    name = dset.name
    if dset.dtype.hasobject:
        raise ValueError(f"{name}: variable-length data ({dset.dtype}) is stored in the file's "
                         "heap, not in the dataset: read it with h5py")
    if dset.is_virtual:
        raise ValueError(f"{name}: a virtual dataset (its data is in other datasets)")
    if dset.external:
        raise ValueError(f"{name}: stored in external files")
    dcpl = dset.id.get_create_plist()
    filters = _filter_names(dcpl)
    if filters:
        raise ValueError(f"{name}: filtered ({', '.join(filters)}): gpufile.hdf5.read takes "
                         "unfiltered datasets only; read it with h5py, which decompresses on "
                         "the CPU")
    layout = dcpl.get_layout()
    shape = tuple(dset.shape)
    if layout == h5py.h5d.COMPACT:
        raise ValueError(f"{name}: a compact dataset (its bytes are in the object header); "
                         "read it with h5py")
    if layout == h5py.h5d.CONTIGUOUS:
        # Storage size first: with a user block, HDF5 offsets even an unallocated address.
        nbytes = dset.id.get_storage_size()
        if nbytes == 0:
            return shape, [Piece((0,) * len(shape), shape, None)]
        if nbytes != dset.nbytes:
            raise ValueError(f"{name}: {nbytes} bytes stored for {dset.nbytes} expected")
        return shape, [Piece((0,) * len(shape), shape, dset.id.get_offset())]
    if layout != h5py.h5d.CHUNKED:
        raise ValueError(f"{name}: storage layout {layout} is not read by gpufile.hdf5.read")
    chunk = tuple(dset.chunks)
    chunk_bytes = math.prod(chunk) * dset.dtype.itemsize
    stored = {}

    def keep(info):
        if info.size != chunk_bytes:
            raise ValueError(f"{name}: the chunk at {tuple(info.chunk_offset)} stores "
                             f"{info.size} bytes, a {chunk} chunk has {chunk_bytes}")
        stored[tuple(info.chunk_offset)] = info.byte_offset

    if hasattr(dset.id, "chunk_iter"):  # HDF5 1.14's H5Dchunk_iter: one pass over the index
        dset.id.chunk_iter(keep)
    else:
        for i in range(dset.id.get_num_chunks()):
            keep(dset.id.get_chunk_info(i))
    start = start if start is not None else (0,) * len(shape)
    stop = stop if stop is not None else shape
    grid = [range(a // c * c, b, c) for a, b, c in zip(start, stop, chunk)]
    pieces = [Piece(o, chunk, stored.get(o)) for o in itertools.product(*grid)]
    return chunk, pieces


# ---- the selection ------------------------------------------------------------------------------

def selection_box(shape: Sequence[int], selection) -> Tuple[Tuple[int, ...], Tuple[int, ...],
                                                             Tuple[int, ...]]:
    """(start, stop, shape of the result) of a selection made of slices with step 1, integers and
    one Ellipsis, as h5py's ``dset[...]`` takes them; None selects everything."""
    rank = len(shape)
    if selection is None:
        selection = ()
    if not isinstance(selection, tuple):
        selection = (selection,)
    if sum(s is Ellipsis for s in selection) > 1:
        raise IndexError("only one Ellipsis in a selection")
    if Ellipsis in selection:
        at = selection.index(Ellipsis)
        fill = rank - (len(selection) - 1)
        selection = selection[:at] + (slice(None),) * fill + selection[at + 1:]
    if len(selection) > rank:
        raise IndexError(f"{len(selection)} indices for a dataset of rank {rank}")
    selection = selection + (slice(None),) * (rank - len(selection))
    start, stop, out_shape = [], [], []
    for dim, (n, s) in enumerate(zip(shape, selection)):
        if isinstance(s, slice):
            lo, hi, step = s.indices(n)
            if step != 1:
                raise IndexError(f"dimension {dim}: step {s.step}; gpufile.hdf5.read takes "
                                 "slices with step 1")
            hi = max(lo, hi)
            start.append(lo)
            stop.append(hi)
            out_shape.append(hi - lo)
        elif isinstance(s, (int, np.integer)) and not isinstance(s, bool):
            i = int(s) + n if s < 0 else int(s)
            if not 0 <= i < n:
                raise IndexError(f"dimension {dim}: index {int(s)} out of range for size {n}")
            start.append(i)
            stop.append(i + 1)
        else:
            raise IndexError(f"dimension {dim}: {s!r}; a selection takes slices with step 1, "
                             "integers and one Ellipsis")
    return tuple(start), tuple(stop), tuple(out_shape)


# ---- the destination ----------------------------------------------------------------------------

class Target:
    """``out`` resolved: its address, size, and device (-1 for host memory)."""

    def __init__(self, out, dtype: np.dtype, shape: Tuple[int, ...], name: str):
        from ._gpufile import _memory_of
        self.keep = out
        self.addr, self.nbytes, self.device = _memory_of(out)
        needed = math.prod(shape) * dtype.itemsize
        described = _described(out)
        if described is not None and described != (dtype, shape):
            got_dtype, got_shape = described
            if not (got_dtype == np.dtype(np.uint8) and len(got_shape) == 1):
                raise ValueError(f"{name}: out is {got_dtype.str} {got_shape}; the selection is "
                                 f"{dtype.str} {shape} (or give a byte buffer of at least "
                                 f"{needed} bytes)")
        if self.nbytes < needed:
            raise ValueError(f"{name}: out holds {self.nbytes} bytes; the selection needs {needed}")
        self.host = None
        self._copier = None
        self._held: List = []  # GPU memory that copies into `out` read from: freed after finish()
        if self.device < 0 and self.nbytes:
            self.host = np.frombuffer((ctypes.c_ubyte * self.nbytes).from_address(self.addr),
                                      dtype=np.uint8)

    @property
    def on_device(self) -> bool:
        return self.device >= 0

    def copier(self):
        """The row copier of this read (GPU memory only), made when first needed."""
        if self._copier is None:
            from ._gpufile import _RowCopier
            self._copier = _RowCopier(self.addr)
        return self._copier

    def hold(self, buffer):
        """Keeps `buffer` (a copy source) allocated until finish(); returns it."""
        self._held.append(buffer)
        return buffer

    def finish(self) -> None:
        """Returns once every copy into `out` landed; lets the held sources go."""
        if self._copier is not None:
            self._copier.finish()
        self._held.clear()


def _described(out) -> Optional[Tuple[np.dtype, Tuple[int, ...]]]:
    """(dtype, shape) of an array-like `out`; None for objects that say neither in a way NumPy
    reads (DLPack-only GPU arrays), which are taken as byte buffers."""
    cai = getattr(out, "__cuda_array_interface__", None)
    if cai is not None:
        return np.dtype(cai["typestr"]), tuple(cai["shape"])
    if isinstance(out, np.ndarray):
        return out.dtype, out.shape
    try:
        view = memoryview(out)
        return np.dtype(view.format), tuple(view.shape)
    except (TypeError, ValueError):
        pass
    if hasattr(out, "__dlpack__"):  # a PyTorch CPU tensor, for one
        try:
            a = np.from_dlpack(out)
        except (TypeError, ValueError, BufferError, RuntimeError):
            return None
        return a.dtype, a.shape
    return None


# ---- moving the bytes ---------------------------------------------------------------------------

def _host_rows(dst: np.ndarray, src: np.ndarray, p: Placement, src_base: int) -> None:
    strided = np.lib.stride_tricks.as_strided
    d = strided(dst[p.dst_offset:], shape=p.counts + (p.run,), strides=p.dst_strides + (1,))
    s = strided(src[src_base:], shape=p.counts + (p.run,), strides=p.src_strides + (1,))
    np.copyto(d, s)


def _staged(p: Placement) -> bool:
    """Whether a placement goes through staging: several runs, each short."""
    return p.rows > 1 and p.run < DIRECT_RUN_BYTES


def _device_rows(target: "Target", dst_addr: int, src_addr: int, p: Placement) -> int:
    """Queues the rows of `p` from src_addr to dst_addr; returns the copy's ticket."""
    counts, dst_strides, src_strides = (p.counts, p.dst_strides, p.src_strides) if p.counts \
        else ((1,), (0,), (0,))
    return target.copier().copy(dst_addr, src_addr, p.run, list(counts), list(dst_strides),
                                list(src_strides))


class Filler:
    """Writes the fill value into the runs of a placement."""

    def __init__(self, target: Target, fill: np.ndarray):
        self.target = target
        self.fill = fill.view(np.uint8)  # one element's bytes
        self.block = None  # GPU memory holding fill values, made when first needed

    def __call__(self, p: Placement) -> None:
        item = self.fill.size
        if not self.target.on_device:
            d = np.lib.stride_tricks.as_strided(
                self.target.host[p.dst_offset:], shape=p.counts + (p.run // item, item),
                strides=p.dst_strides + (item, 1))
            d[...] = self.fill
            return
        block = self._device_block(min(p.run, FILL_BLOCK_BYTES // item * item or item))
        whole, rest = divmod(p.run, block.nbytes)
        base = self.target.addr + p.dst_offset
        # A long run is `whole` copies of the block side by side, then what is left of it.
        if whole:
            _device_rows(self.target, base, block.ptr, Placement(
                block.nbytes, p.counts + (whole,), 0, (0,) * (len(p.counts) + 1), 0,
                p.dst_strides + (block.nbytes,)))
        if rest:
            _device_rows(self.target, base + whole * block.nbytes, block.ptr, Placement(
                rest, p.counts, 0, (0,) * len(p.counts), 0, p.dst_strides))

    def _device_block(self, nbytes: int):
        if self.block is None or self.block.nbytes < nbytes:
            from ._gpufile import DeviceBuffer
            host = np.resize(self.fill, nbytes)
            self.block = self.target.hold(DeviceBuffer(nbytes, self.target.device))
            self.block.copy_from_host(host)
        return self.block


class Reader:
    """Reads placements through one gpufile.File, many at once, each into its place or through
    a staging slot; waits for every read before it returns or raises.

    Staging is one allocation in the memory of `out` (one cuMemAlloc for a GPU array), cut into
    `slots` slots of `slot_bytes`; a slot is free again once the copy out of it landed."""

    def __init__(self, file, target: Target, name: str, slot_bytes: int, staged_pieces: int):
        self.file = file
        self.target = target
        self.name = name
        self.pending: deque = deque()  # (future, bytes expected, file offset, then-callback)
        self.slot_bytes = slot_bytes
        self.slots = min(staged_pieces, MAX_IN_FLIGHT, max(2, STAGING_BYTES // max(1, slot_bytes)))
        self.pool = None  # the staging allocation, made when first needed
        self.pool_addr = 0
        self.made = 0  # slots handed out so far
        # Free slots, oldest first: (offset in the pool, ticket of the copy out of it or None).
        # The oldest copy is the one most likely to have landed already.
        self.free: deque = deque()

    def read(self, file_offset: int, p: Placement) -> None:
        if not _staged(p):
            for i in itertools.product(*map(range, p.counts)):
                src = sum(n * s for n, s in zip(i, p.src_strides))
                dst = sum(n * s for n, s in zip(i, p.dst_strides))
                self._start(self.target.addr + p.dst_offset + dst, p.run,
                            file_offset + p.src_offset + src, None)
            return
        slot = self._slot()
        self._start(self.pool_addr + slot, p.src_span(), file_offset + p.src_offset,
                    lambda: self._place(slot, p))

    def drain(self) -> None:
        """Waits for every read; raises the first failure after all are over."""
        failure = None
        while self.pending:
            try:
                self._finish_oldest()
            except BaseException as e:  # noqa: BLE001 (kept to raise once all are done)
                failure = failure or e
        if failure is not None:
            raise failure

    def abandon(self) -> None:
        """Waits for every read in flight, ignoring their outcome (after a failure)."""
        while self.pending:
            future = self.pending.popleft()[0]
            try:
                future.result()
            except Exception:  # noqa: BLE001 (the first failure is already being raised)
                pass

    def _start(self, addr: int, n: int, file_offset: int, then) -> None:
        while len(self.pending) >= MAX_IN_FLIGHT:
            self._finish_oldest()
        self.pending.append((self.file.pread_ptr(addr, n, file_offset), n, file_offset, then))

    def _finish_oldest(self) -> None:
        future, n, file_offset, then = self.pending.popleft()
        got = future.result()
        if got != n:
            raise OSError(f"{self.name}: read {got} of {n} bytes at file offset {file_offset}: "
                          "the file is shorter than HDF5 says (truncated?)")
        if then is not None:
            then()

    def _slot(self) -> int:
        """A free staging slot's offset in the pool."""
        while not self.free and self.made >= self.slots:
            self._finish_oldest()
        if self.free:
            slot, ticket = self.free.popleft()
            if ticket is not None:
                self.target.copier().wait(ticket)  # the rows left it before it is read into
            return slot
        if self.pool is None:
            nbytes = self.slots * self.slot_bytes
            if self.target.on_device:
                from ._gpufile import DeviceBuffer
                self.pool = self.target.hold(DeviceBuffer(nbytes, self.target.device))
                self.pool_addr = self.pool.ptr
            else:
                self.pool = np.empty(nbytes, dtype=np.uint8)
                self.pool_addr = self.pool.ctypes.data
        self.made += 1
        return (self.made - 1) * self.slot_bytes

    def _place(self, slot: int, p: Placement) -> None:
        # The slot holds the piece's bytes from p.src_offset on.
        ticket = None
        if self.target.on_device:
            ticket = _device_rows(self.target, self.target.addr + p.dst_offset,
                                  self.pool_addr + slot, p)
        else:
            _host_rows(self.target.host, self.pool, p, slot)
        self.free.append((slot, ticket))


def read(dset, out, selection=None) -> int:
    """See gpufile.hdf5.read."""
    name = dset.name
    dtype = dset.dtype
    start, stop, out_shape = selection_box(dset.shape, selection)
    _block, pieces = storage(dset, start, stop)
    target = Target(out, dtype, out_shape, name)
    itemsize = dtype.itemsize
    placed = [(piece, p) for piece in pieces
              if (p := place(piece, start, stop, itemsize)) is not None]
    for _piece, p in placed:  # a check of the plan: nothing lands outside out
        if p.dst_end() > target.nbytes:
            raise ValueError(f"{name}: a piece would land past the end of out")
    total = math.prod(b - a for a, b in zip(start, stop)) * itemsize
    try:
        _fill_and_read(dset, target, placed)
    except BaseException:
        try:
            target.finish()  # nothing lands in `out` after the call, failed or not
        except Exception:  # noqa: BLE001 (the first failure is the one to raise)
            pass
        raise
    target.finish()
    return total


def _fill_and_read(dset, target: Target, placed) -> None:
    name = dset.name
    missing = [p for piece, p in placed if piece.file_offset is None]
    if missing and _fills(dset):
        filler = Filler(target, np.array(dset.fillvalue, dtype=dset.dtype).reshape(1))
        for p in missing:
            filler(p)
    stored = [(piece, p) for piece, p in placed if piece.file_offset is not None]
    if not stored:
        return
    stored = [(piece, q) for piece, p in stored
              for q in (split(p, STAGING_BYTES // 4) if _staged(p) else (p,))]
    staged = [p.src_span() for _piece, p in stored if _staged(p)]
    from . import open as gpufile_open
    with gpufile_open(dset.file.filename) as f:
        reader = Reader(f, target, name, max(staged, default=0), len(staged))
        try:
            for piece, p in stored:
                reader.read(piece.file_offset, p)
            reader.drain()
        except BaseException:
            reader.abandon()
            raise


def _fills(dset) -> bool:
    """Whether HDF5 writes the fill value into a read of storage never written: not when the
    dataset's fill time is "never" or it has no fill value (HDF5 then leaves the buffer as it
    was, and so does gpufile.hdf5.read)."""
    import h5py  # type: ignore[import-untyped]
    dcpl = dset.id.get_create_plist()
    return (dcpl.get_fill_time() != h5py.h5d.FILL_TIME_NEVER
            and dcpl.fill_value_defined() != h5py.h5d.FILL_VALUE_UNDEFINED)
