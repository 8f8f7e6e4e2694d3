"""load_into: a checkpoint's tensors read straight into memory the caller has (a model's
state_dict), whole or, with a split rule, each rank's part. Every destination is checked against
the checkpoint before the first byte is read; memory given twice is filled once. Imported on
first use."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ._checkpoint import _sources
from ._header import PathLike, SafetensorError
from ._memory import _device_of, _settle_sources
from ._plan import _box_plan
from ._reading import _read_all, _SessionOpening
from ._save import _describe_tensor, _Outgoing
from ._split import SplitRule, _part, _ranks, _split_rule


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
