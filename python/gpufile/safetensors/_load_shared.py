"""load_file(..., group=G): every rank of a group ends with the whole checkpoint, but each reads
only its share of every file; the group's all-gather brings the rest from the other ranks (over
NVLink, through NCCL, under torch.distributed). Each byte then crosses the host's memory once for
the host rather than once per rank: loading the whole checkpoint on every rank of a host is
bounded by its staging through host memory, a third or less of the GPUs' links on a host of four
(docs/performance.md, "The host model").

How: each file's data section is read into one allocation of `size` equal shares (the last ones
padded), rank r reading share r; one in-place all-gather per file fills the other shares; then
each tensor is a view into that allocation (views=True) or a copy of its bytes into an allocation
of its own. Before the all-gathers the ranks compare a digest of what they loaded (the files'
tensors, their places and sizes), so that ranks given different checkpoints fail with an error
rather than wait on each other; a rank whose own load fails (a missing file, an IO error) takes
part in that step with a failure's digest, so that the others fail too.

A group is a torch.distributed process group (framework "pt"), or any object with rank(),
size() and all_gather_into(out, part), which fills `out` (an array of size x len(part) bytes of
the load's framework) with every rank's `part` in rank order: another framework's collective, or
the tests' ranks in threads. This module is imported only by a load that names a group."""
from __future__ import annotations

import hashlib
import struct
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ._checkpoint import _Source
from ._header import SafetensorError
from ._memory import _allocate, _region, _Target, _view

_ALIGN = 4096  # shares start on page boundaries: whole pages for O_DIRECT reads of a share


class _Group(NamedTuple):
    rank: int
    size: int
    all_gather_into: Any  # (out, part) -> None


def _group(group: Any, t: _Target) -> _Group:
    """What a load needs of `group`: its size, this process's rank in it, its all-gather."""
    if all(hasattr(group, a) for a in ("rank", "size", "all_gather_into")):
        g = _Group(int(group.rank()), int(group.size()), group.all_gather_into)
    else:
        if t.framework != "pt":
            raise SafetensorError("a torch.distributed group loads with framework='pt'")
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise SafetensorError("group given, but torch.distributed is not initialized "
                                  "(dist.init_process_group first)")
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise SafetensorError("this process is not a member of the group it gave")
        g = _Group(rank, size, lambda out, part: dist.all_gather_into_tensor(out, part, group=group))
    if g.size < 1 or not 0 <= g.rank < g.size:
        raise SafetensorError(f"bad group: rank {g.rank} of {g.size}")
    return g


def _share(span: int, size: int) -> int:
    """The bytes of one rank's share of a data section of `span` bytes: equal shares on page
    boundaries, the last ones shorter or empty."""
    if span <= 0:
        return 0
    each = -(-span // size)
    return -(-each // _ALIGN) * _ALIGN


def _mine(span: int, share: int, rank: int) -> Tuple[int, int]:
    """[begin, end) of rank's share within the data section (empty past its end)."""
    begin = min(rank * share, span)
    return begin, min(begin + share, span)


class _File(NamedTuple):
    src: _Source
    lo: int         # the data section's first byte of the loaded tensors
    span: int
    share: int
    region: Any     # size x share bytes (the framework's array)


def load_shared(t: _Target, filename: Any, group: Any, views: bool) -> Dict[str, Any]:
    if t.framework == "dlpack":
        raise SafetensorError("a load shared by a group uses framework 'pt' or 'numpy'")
    g = _group(group, t)
    from ._loaders import _load, _load_whole
    result: Dict[str, Any] = {}
    if g.size == 1:  # nothing to share: the plain load (no copy out of a region, no digest)
        _load(t, filename, lambda src, read: _load_whole(t, src, views, result, read))
        return result
    files: List[_File] = []

    def fill(src: _Source, read) -> list:
        h = src.header
        lo = min((h.tensors[n].begin for n in src.names), default=0)
        hi = max((h.tensors[n].end for n in src.names), default=0)
        share = _share(hi - lo, g.size)
        region = _region(t, share * g.size)
        begin, end = _mine(hi - lo, share, g.rank)
        if end > begin:
            read(region.ptr + begin, end - begin, h.data_start + lo + begin,
                 f"{src.path}: rank {g.rank}'s share")
        files.append(_File(src, lo, hi - lo, share, region.obj))
        return []

    try:
        _load(t, filename, fill)
    except BaseException:
        # The other ranks wait in the digests' all-gather: this one takes part with the failure's
        # digest, so that every rank raises rather than waits, then raises its own error.
        try:
            _agree(t, g, None)
        except BaseException:  # noqa: BLE001 - the load's own failure is the one raised
            pass
        raise
    _agree(t, g, files)
    for f in files:
        if f.share:
            part = f.region[g.rank * f.share:(g.rank + 1) * f.share]
            g.all_gather_into(f.region[:g.size * f.share], part)
        _place(t, f, views, result)
    return result


def _place(t: _Target, f: _File, views: bool, result: Dict[str, Any]) -> None:
    """Each tensor of `f` as a view into its region, or copied into an allocation of its own."""
    h = f.src.header
    for n in f.src.names:
        info = h.tensors[n]
        if views:
            result[n] = _view(t, f.region, info, f.lo)
            continue
        dest = _allocate(t, info.dtype, info.shape)
        a, b = info.begin - f.lo, info.end - f.lo
        if b > a:
            if t.framework == "pt":
                import torch
                dest.obj.view(-1).view(torch.uint8).copy_(f.region[a:b])
            else:
                dest.obj.reshape(-1).view("u1")[:] = f.region[a:b]
        result[n] = dest.obj


def _digest(files: List[_File]) -> bytes:
    """What this rank loaded, as 16 bytes: every file's tensors, their places and shapes."""
    d = hashlib.blake2b(digest_size=16)
    for f in files:
        d.update(struct.pack("<qqq", f.lo, f.span, len(f.src.names)))
        for n in f.src.names:
            info = f.src.header.tensors[n]
            d.update(repr((n, info.dtype, tuple(info.shape), info.begin, info.end)).encode())
    return d.digest()


_FAILED = b"\xff" * 16  # the digest of a rank whose own load failed


def _agree(t: _Target, g: _Group, files: Optional[List[_File]]) -> None:
    """Every rank gathers every rank's digest (`files` None: this rank's load failed); any
    difference fails the load on every rank."""
    mine = _digest(files) if files is not None else _FAILED
    out = _region(t, len(mine) * g.size).obj
    part = out[g.rank * len(mine):(g.rank + 1) * len(mine)]
    if t.framework == "pt":
        import torch
        part.copy_(torch.frombuffer(bytearray(mine), dtype=torch.uint8))
        g.all_gather_into(out, part)
        every = bytes(out.cpu().numpy().tobytes())
    else:
        import numpy as np
        part[:] = np.frombuffer(mine, dtype=np.uint8)
        g.all_gather_into(out, part)
        every = bytes(out.tobytes())
    digests = [every[r * len(mine):(r + 1) * len(mine)] for r in range(g.size)]
    failed = [r for r, d in enumerate(digests) if d == _FAILED]
    if failed and files is not None:
        raise SafetensorError(f"ranks {failed[:8]} of the group failed to load the checkpoint (their "
                              "own errors say why): no rank goes on with a part of it")
    differ = [r for r, d in enumerate(digests) if d != mine]
    if differ and files is not None:
        raise SafetensorError(f"ranks {differ[:8]} of the group loaded another checkpoint than rank "
                              f"{g.rank} (other files, tensors or sizes): every rank must load the same")
