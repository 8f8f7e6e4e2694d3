"""Split rules of tensor parallelism: which dimension a tensor is split along (a mapping or a
function of name and shape), which part is a rank's (shard_slice: the parts of
numpy.array_split and torch.tensor_split), and the rank and world size from the arguments or
torch.distributed's process group."""
from __future__ import annotations

from typing import Callable, List, Mapping, Optional, Sequence, Tuple, Union

from ._header import SafetensorError, TensorInfo
from ._plan import _normalize_index


SplitRule = Union[Mapping[str, Optional[int]], Callable[[str, Tuple[int, ...]], Optional[int]]]


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


def shard_slice(shape: Sequence[int], dim: int, rank: int, world_size: int) -> Tuple[slice, ...]:
    """The index of `rank`'s part when a tensor is split into `world_size` parts along `dim`
    (the first size % world_size parts one larger, as numpy.array_split and torch.tensor_split)."""
    n = shape[dim]
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return tuple(slice(start, stop) if i == dim else slice(None) for i in range(len(shape)))
