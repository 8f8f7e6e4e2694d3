"""load_sharded, tensor-parallel loading into new memory: each rank allocates and reads only its
part of every split tensor, through load_file's frame (_loaders._load); tensors every rank holds
whole are read by each rank or read once and broadcast. Imported on first use."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ._checkpoint import _Source
from ._header import PathLike, SafetensorError
from ._loaders import _load
from ._memory import _allocate, _device_number, _target
from ._plan import _box_plan
from ._split import SplitRule, _part, _ranks, _split_rule

if TYPE_CHECKING:
    from .. import _scatter


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
