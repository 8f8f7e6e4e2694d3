"""safetensors checkpoints straight into GPU memory, and back.

    from gpufile.safetensors import load_file, save_file, safe_open
    tensors = load_file("model.safetensors", device="cuda:0")       # dict of torch tensors
    tensors = load_file("model.safetensors.index.json", device="cuda:0")   # sharded checkpoints
    save_file(tensors, "copy.safetensors")

The file format is the `safetensors` package's: files written by either load with the other.
Every tensor's bytes go from the file to its final place in one IO through gpufile's pipelined
data path (no extra copy, bounded pinned staging memory whatever the checkpoint's size).

Lifetime: returned tensors own their memory. With ``views=True`` every tensor of a file is a view
into one allocation holding the whole data section (one large read, the fastest load); that
allocation lives as long as any of its views.

Frameworks: "pt" (torch tensors), "numpy" (host only), "dlpack" (gpufile.DeviceArray objects on
the GPU, which torch, CuPy and JAX take with from_dlpack, without a copy).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

# The package is cut by concern, each module saying what it holds: _header (the format),
# _checkpoint (where tensors come from), _memory (where they go), _plan and _reading (which reads,
# and running them), _split (tensor-parallel parts), then the API: _loaders (load_file, and
# _load_shared for a load shared by a group), _load_sharded, _load_into, _save and _safe_open. Imports run one way, from the API modules down
# to _header; none imports this file.
from .. import _dtypes  # noqa: F401 - gpufile.safetensors._dtypes, as before the package was cut
from .. import _import_lazy
from ._header import Header, SafetensorError, TensorInfo, parse_header, read_header
from ._header import MAX_HEADER_SIZE, PathLike  # noqa: F401 - public, though not in __all__
from ._loaders import load_file

# The internals bench/first_load_phases.py times one phase at a time, where it found them before.
from ._checkpoint import _sources  # noqa: F401
from ._memory import _allocate, _settle_allocations, _target  # noqa: F401
from ._reading import _read_all, _SessionOpening  # noqa: F401

if TYPE_CHECKING:
    from ._load_into import LoadResult, load_into
    from ._load_sharded import load_sharded
    from ._safe_open import safe_open
    from ._save import save_file
    from ._split import SplitRule, shard_slice

__all__ = ["SafetensorError", "TensorInfo", "Header", "parse_header", "read_header", "load_file",
           "save_file", "safe_open", "load_sharded", "load_into", "LoadResult", "shard_slice"]

# What a plain load_file needs is imported here; the rest on first use (docs/python.md, "Import
# cost"): the other loaders, the writer, safe_open and the split rules (their modules, on the
# first lookup of their names here), the scatter of split tensors (_scatter, _boxes:
# load_sharded, load_into, safe_open's slices) and DeviceArray (framework="dlpack").
_LAZY = {"load_sharded": "._load_sharded", "load_into": "._load_into", "LoadResult": "._load_into",
         "save_file": "._save", "safe_open": "._safe_open", "shard_slice": "._split", "SplitRule": "._split"}


def __getattr__(name: str):
    return _import_lazy(globals(), _LAZY, name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
