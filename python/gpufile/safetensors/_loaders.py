"""load_file, and the frame it shares with load_sharded (_load): find the sources, let the caller
allocate each source's destinations and plan its reads, start a local file's reads as soon as
their destinations exist, and read the rest once everything is allocated. The other loaders,
load_sharded and load_into, have modules of their own, imported on first use: a plain load_file
never pays for them."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

from ._checkpoint import _close_sources, _Source, _sources
from ._header import PathLike
from ._memory import _allocate, _region, _settle_allocations, _Target, _target, _view
from ._reading import _EarlyReads, _SessionOpening

if TYPE_CHECKING:
    from .. import _scatter
    from ._reading import _Plan


def load_file(filename: PathLike, device: Any = "cpu", *, framework: str = "pt",
              views: bool = False, group: Any = None) -> Dict[str, Any]:
    """Loads every tensor of a checkpoint into `device`.

    `filename` is a .safetensors file, a model.safetensors.index.json (sharded checkpoints: every
    shard is read at once) or a directory holding either. Returns {name: tensor}. With
    ``views=True`` each file's tensors are views into one allocation of its data section.

    `group`: every rank of this torch.distributed process group calls load_file with the same
    checkpoint and ends with all of it, each reading only its share of every file, the rest
    coming from the other ranks through the group's all-gather (_load_shared says how). Each
    file's data section is then held whole while its tensors are copied out (not with views).
    """
    t = _target(framework, device)
    if group is not None:
        from ._load_shared import load_shared
        return load_shared(t, filename, group, views)
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
