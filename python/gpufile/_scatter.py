"""Parts of tensors that are many short runs in the file, read through their span.

A rank's part of a tensor split along a later dimension (the columns of a row-parallel weight)
is one short run per row: read run by run, that is one small IO per row, and a tensor-parallel
load ran at a tenth of the speed of loading the whole checkpoint (docs/python.md). Instead, the
bytes from the part's first run to its last are read whole, in pieces of whole rows of at most
PIECE_BYTES, into a staging buffer in the memory of the destination, and the part's runs are
placed from there with one strided copy:

- GPU destinations: staging in GPU memory, read as a whole load reads (gpufile's routes into
  GPU memory: staged O_DIRECT, page-cache DMA for cached bytes), then pitched device-to-device
  copies (cuMemcpy2DAsync, through the row copier gpufile.hdf5.read uses) into the part, on GPU
  memory bandwidth. This moves world_size times the part's bytes over PCIe (the other ranks'
  columns too). The alternative, pinned host staging and pitched host-to-device copies of the
  part alone, moves fewer bytes over PCIe, but needs pinned memory managed by the Python layer,
  a CPU copy of every span byte (no page-cache DMA into host memory) and short-row copies over
  PCIe; it is left for when PCIe turns out to be the limit (docs/python.md, "Not done yet").
- Host destinations: staging in host memory, then one NumPy strided copy (no NumPy: run by run).

Parts for the GPU whose span the page cache holds, at most a third of it, are gathered instead
(GATHER, GATHER_FRACTION): gpufile reads the part's runs out of the page cache into pinned
staging on the CPU, packed, and copies them to the GPU (gpufile.File._pread_rows_ptr,
src/exec/gather.hpp). Only the part's bytes cross host memory and the link, where a span read
moves world_size times as many: on a host with several GPUs, host memory is what bounds a
tensor-parallel load (docs/performance.md, "The host model"). Spans not cached are read as
above: one run at a time would wait for the disk run by run.

Staging is bounded (STAGING_BYTES per destination device, in slots of one piece each), reused
while the load runs and let go when it ends, after every copy out of it landed.
"""
from __future__ import annotations

import ctypes
import itertools
from collections import deque
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Tuple

from ._boxes import Placement, split

# Parts whose runs are shorter than this (and more than one) are read through their span. Reads
# of at least this size already run at the pipeline's speed: gpufile shares a request between
# threads in pieces of at least gpufile.min_chunk_kb (256 KiB by default), so shorter ones are
# one thread's IO each.
SPAN_RUN_BYTES = 256 << 10
# The most bytes of the file one span read covers: a part is cut into pieces of whole rows.
PIECE_BYTES = 64 << 20
# Staging held at once per destination device (host memory counts as one), and span reads in
# flight at once.
STAGING_BYTES = 256 << 20
MAX_IN_FLIGHT = 16
# Gathers running at once, each on a thread of gpufile's own beside its IO workers: on two H200
# (16 cores a rank) a tensor-parallel load with 16 ran 0.158-0.242 s, with 8 0.152-0.153, with 4
# 0.172-0.174 (docs/performance.md, "Parts gathered out of the page cache").
GATHER_IN_FLIGHT = 8

HOST = -1  # the device number of host memory

# Whether GPU parts are gathered out of the page cache (the docstring above): "auto" where the
# page cache holds the piece's span and the part is at most GATHER_FRACTION of it, "never"
# (always through the span), "always" (whatever the cache holds; for tests).
GATHER = "auto"
# A gather pays a kernel read per run (1.9-4 GB/s of a part's bytes a thread, against 7-15 for
# a span read on one H200), so it wins only where the span is several times the part: with 8 at
# once, 2-way parts 21.6-23.4 GB/s gathered against 24.3-24.5 through their span, 4-way 17.2
# against 12.3, 8-way 10.9-11.2 against 6.1-6.2 (bench/gather_parts.py; docs/performance.md,
# "Parts gathered out of the page cache").
GATHER_FRACTION = 1 / 3


class Scatter(NamedTuple):
    """One piece of a part, read whole from `file_offset` (the start of the tensor in the file;
    the piece begins placement.src_offset after it) and placed into memory at `dest_ptr` of
    `device` (a CUDA device number, or HOST)."""
    dest_ptr: int
    device: int
    file_offset: int
    placement: Placement
    what: str

    @property
    def span(self) -> int:
        return self.placement.src_span()


def through_span(p: Placement) -> bool:
    """Whether a part laid out as `p` is read through its span: several runs, each short."""
    return p.rows > 1 and p.run < SPAN_RUN_BYTES


def host_scatter_available() -> bool:
    """Host destinations need NumPy for their strided copy; without it, they are read run by run."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def pieces(p: Placement) -> List[Placement]:
    """`p` cut along its outer dimensions into pieces whose spans are at most PIECE_BYTES; a
    piece left with a single run is read straight into its place (through_span is false)."""
    return list(split(p, PIECE_BYTES))


def gathers(f: Any, s: Scatter) -> bool:
    """Whether piece `s` is gathered out of the page cache by the open file `f` (GATHER): a GPU
    destination laid out row after row, a local file, and (auto) a part that is a small
    fraction of its span, which the page cache holds."""
    p = s.placement
    if GATHER == "never" or s.device == HOST or not _packed(p):
        return False
    cached = getattr(f, "_cached", None)  # remote objects have no page cache
    if cached is None:
        return False
    if GATHER == "always":
        return True
    return p.rows * p.run <= GATHER_FRACTION * s.span and cached(s.file_offset + p.src_offset, s.span) is True


def _packed(p: Placement) -> bool:
    """Whether `p`'s runs lie end to end in the destination, in order."""
    step = p.run
    for n, stride in zip(reversed(p.counts), reversed(p.dst_strides)):
        if stride != step:
            return False
        step *= n
    return True


def direct_reads(p: Placement) -> List[Tuple[int, int, int]]:
    """(offset in the destination, bytes, offset from the tensor's start in the file) of each run
    of `p`, for reading run by run."""
    out = []
    for i in itertools.product(*map(range, p.counts)):
        src = sum(n * s for n, s in zip(i, p.src_strides))
        dst = sum(n * s for n, s in zip(i, p.dst_strides))
        out.append((p.dst_offset + dst, p.run, p.src_offset + src))
    return out


class _Staging:
    """The staging of one destination device: `slots` slots of `slot_bytes`, one allocation made
    when first needed. A slot is free again once the copy out of it landed."""

    def __init__(self, device: int, slot_bytes: int, slots: int):
        self.device = device
        self.slot_bytes = slot_bytes
        self.slots = slots
        self.memory: Any = None
        self.addr = 0
        self.host: Any = None  # host staging as a NumPy byte array
        self.made = 0
        self.free: Deque[Tuple[int, Optional[int]]] = deque()  # (offset, ticket of its copy out)
        self.copier: Any = None  # GPU only: the row copier into this device's memory

    def allocate(self) -> None:
        nbytes = self.slots * self.slot_bytes
        if self.device == HOST:
            import numpy as np
            self.memory = self.host = np.empty(nbytes, dtype=np.uint8)
            self.addr = self.host.ctypes.data
        else:
            from ._gpufile import DeviceBuffer
            self.memory = DeviceBuffer(nbytes, self.device)
            self.addr = self.memory.ptr


class Spans:
    """Reads scatters, many at once, each whole into a staging slot, then places its runs.

    finish() returns once every read ended and every copy into a destination landed, and lets
    the staging go; it raises the first failure, after all of that. `short_read(what, got, n)`
    makes the error of a read that came back short (the file shrank while loading)."""

    def __init__(self, scatters: List[Scatter], short_read: Callable[[str, int, int], BaseException]):
        self._short_read = short_read
        self._pending: Deque[Tuple[Any, int, str, Callable[[], None]]] = deque()
        self._gathering = 0  # gathers among them
        self._staging: Dict[int, _Staging] = {}
        for s in scatters:
            st = self._staging.get(s.device)
            if st is None:
                st = self._staging[s.device] = _Staging(s.device, 0, 0)
            st.slot_bytes = max(st.slot_bytes, s.span)
            st.slots += 1
        for st in self._staging.values():
            st.slots = min(st.slots, MAX_IN_FLIGHT, max(2, STAGING_BYTES // max(1, st.slot_bytes)))

    def read(self, f: Any, s: Scatter) -> None:
        """Starts reading `s` from the open gpufile.File `f`; its runs are placed once it ended."""
        if gathers(f, s):
            return self._gather(f, s)
        st = self._staging[s.device]
        slot = self._slot(st, s)
        n = s.span
        future = f.pread_ptr(st.addr + slot, n, s.file_offset + s.placement.src_offset)
        self._pending.append((future, n, s.what, lambda: self._place(st, slot, s)))

    def _gather(self, f: Any, s: Scatter) -> None:
        while len(self._pending) >= MAX_IN_FLIGHT or self._gathering >= GATHER_IN_FLIGHT:
            self._finish_oldest()
        p = s.placement
        future = f._pread_rows_ptr(s.dest_ptr + p.dst_offset, p.run, list(p.counts), list(p.src_strides),
                                   s.file_offset + p.src_offset)
        self._pending.append((future, p.rows * p.run, s.what, _gathered))
        self._gathering += 1

    def finish(self) -> None:
        """Waits for every read and copy (also after a failure), lets the staging go, and raises
        the first failure."""
        failure: Optional[BaseException] = None
        while self._pending:
            try:
                self._finish_oldest(place=failure is None)
            except BaseException as e:  # noqa: BLE001 - every read must end before staging goes
                failure = failure or e
        for st in self._staging.values():
            if st.copier is not None:
                try:
                    st.copier.finish()
                except BaseException as e:  # noqa: BLE001
                    failure = failure or e
                st.copier = None  # its destructor waits for its stream too
            st.memory = st.host = None
        if failure is not None:
            raise failure

    def _finish_oldest(self, place: bool = True) -> None:
        future, n, what, then = self._pending.popleft()
        if then is _gathered:
            self._gathering -= 1
        got = future.result()
        if got != n:
            raise self._short_read(what, got, n)
        if place:
            then()

    def _slot(self, st: _Staging, s: Scatter) -> int:
        """A free slot of `st`, waiting for the oldest reads (of any device) to end until one is."""
        while len(self._pending) >= MAX_IN_FLIGHT or (not st.free and st.made >= st.slots):
            self._finish_oldest()
        if st.free:
            slot, ticket = st.free.popleft()
            if ticket is not None:
                st.copier.wait(ticket)  # the runs left it before it is read into again
            return slot
        if st.memory is None:
            st.allocate()
        st.made += 1
        return (st.made - 1) * st.slot_bytes

    def _place(self, st: _Staging, slot: int, s: Scatter) -> None:
        # The slot holds the file's bytes from the piece's first run on.
        p = s.placement
        ticket = None
        if st.device == HOST:
            _host_rows(s.dest_ptr, st.host, slot, p)
        else:
            if st.copier is None:
                from ._gpufile import _RowCopier
                st.copier = _RowCopier(s.dest_ptr)
            ticket = st.copier.copy(s.dest_ptr + p.dst_offset, st.addr + slot, p.run, list(p.counts),
                                    list(p.dst_strides), list(p.src_strides))
        st.free.append((slot, ticket))


def _gathered() -> None:
    """A gather's runs are in place when it ends: nothing to do after."""


def _host_rows(dest_ptr: int, staging: Any, slot: int, p: Placement) -> None:
    import numpy as np
    end = p.dst_offset + sum((n - 1) * s for n, s in zip(p.counts, p.dst_strides)) + p.run
    dest = np.ctypeslib.as_array((ctypes.c_ubyte * end).from_address(dest_ptr))
    strided = np.lib.stride_tricks.as_strided
    d = strided(dest[p.dst_offset:], shape=p.counts + (p.run,), strides=p.dst_strides + (1,))
    s = strided(staging[slot:], shape=p.counts + (p.run,), strides=p.src_strides + (1,))
    np.copyto(d, s)
