"""Where a checkpoint's tensors come from: one file, a model.safetensors.index.json and its
shards, a folder holding either, or the same over s3:// and http(s)://. Each file becomes a
_Source: its header and the names wanted from it (and, for a remote object, the RemoteFile kept
open so the data is read from the version its header came from)."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence

from .._gpufile import RemoteFile
from ._header import (MAX_HEADER_SIZE, Header, PathLike, SafetensorError, _is_url, _read_exactly, _remote_header,
                      read_header)


class _Source(NamedTuple):
    path: str
    header: Header
    names: List[str]  # the tensors wanted from this file
    # A remote object stays open from its header to its data, so every read is of the version
    # the header came from (each GET carries the ETag of the open); None for local files.
    remote: Optional[RemoteFile] = None


def _sources(path: PathLike) -> List[_Source]:
    """One file, a model.safetensors.index.json, or a directory holding either; or the URL of
    a file or of an index (a URL ending in "/" is a directory: its index, else its
    model.safetensors, else, on s3://, every .safetensors object right under it)."""
    if _is_url(path):
        return _remote_sources(os.fspath(path))
    path = os.fspath(path)
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        single = os.path.join(path, "model.safetensors")
        if os.path.exists(index):
            path = index
        elif os.path.exists(single):
            path = single
        else:
            files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
            if not files:
                raise SafetensorError(f"no .safetensors files in {path}")
            return _sources_of([os.path.join(path, f) for f in files])
    if path.endswith(".json"):
        return _sources_of_index(path)
    return _sources_of([path])


def _sources_of(paths: Sequence[str]) -> List[_Source]:
    out = [_Source(p, h, list(h.tensors)) for p, h in ((p, read_header(p)) for p in paths)]
    _refuse_duplicates(out)
    return out


def _refuse_duplicates(sources: Sequence[_Source]) -> None:
    """Each tensor in one file only: a folder's files have no index to say which one holds it."""
    seen: Dict[str, str] = {}
    for src in sources:
        for name in src.names:
            if name in seen:
                raise SafetensorError(f"tensor {name!r} is in both {seen[name]} and {src.path}")
            seen[name] = src.path


def _weight_map(index: Any, where: str) -> Dict[str, List[str]]:
    """Shard file name -> the tensor names an index maps to it; shard names stay inside the
    index's directory."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise SafetensorError(f"{where}: no weight_map of tensor name -> file name")
    by_file: Dict[str, List[str]] = {}
    for name, file in weight_map.items():
        if os.path.isabs(file) or ".." in file.replace("\\", "/").split("/"):
            raise SafetensorError(f"{where}: shard path {file!r} leaves the checkpoint's directory")
        by_file.setdefault(file, []).append(name)
    return by_file


def _check_shard(p: str, h: Header, names: List[str]) -> None:
    missing = [n for n in names if n not in h.tensors]
    if missing:
        raise SafetensorError(f"{p} lacks {len(missing)} tensor(s) the index maps to it, e.g. {missing[0]!r}")


def _sources_of_index(index_path: str) -> List[_Source]:
    with open(index_path, "rb") as f:
        try:
            index = json.load(f)
        except (ValueError, RecursionError) as e:
            raise SafetensorError(f"{index_path}: not valid JSON: {e}") from None
    base = os.path.dirname(os.path.abspath(index_path))
    out = []
    for file, names in _weight_map(index, index_path).items():
        p = os.path.join(base, file)
        h = read_header(p)
        _check_shard(p, h, names)
        out.append(_Source(p, h, names))
    return out


# ---- remote checkpoints (s3://, http(s)://) ---------------------------------------------------

def _remote_sources(url: str) -> List[_Source]:
    if url.endswith("/"):  # a folder: its index, else its model.safetensors, else (s3://) all
        try:
            index = RemoteFile(url + "model.safetensors.index.json")
        except FileNotFoundError:
            pass
        else:
            return _remote_index_sources(index)
        try:
            single = RemoteFile(url + "model.safetensors")
        except FileNotFoundError:
            if not url.lower().startswith("s3://"):  # an http(s):// folder cannot be listed
                raise
            return _remote_folder_sources(url)
        return [_remote_source(url + "model.safetensors", single, None)]
    if url.endswith(".json"):
        return _remote_index_sources(RemoteFile(url))
    return [_remote_source(url, RemoteFile(url), None)]


def _remote_folder_sources(url: str) -> List[_Source]:
    """Every .safetensors object right under an s3:// folder with neither an index nor a
    model.safetensors, as a local folder's files are taken: in name order, each tensor in one."""
    from .._s3 import list_all
    bucket, _, prefix = url[len("s3://"):].partition("/")
    keys, _ = list_all("s3://" + bucket, prefix, "/")
    names = sorted(k[len(prefix):] for k in keys if k.endswith(".safetensors"))
    if not names:
        raise SafetensorError(f"no .safetensors objects in {url}")
    out: List[_Source] = []
    try:
        for name in names:
            out.append(_remote_source(url + name, RemoteFile(url + name), None))
        _refuse_duplicates(out)
    except BaseException:
        _close_sources(out)
        raise
    return out


def _remote_source(url: str, f: RemoteFile, names: Optional[List[str]]) -> _Source:
    try:
        h = _remote_header(f)
        if names is not None:
            _check_shard(url, h, names)
    except BaseException:
        f.close()
        raise
    return _Source(url, h, list(h.tensors) if names is None else names, f)


def _shard_url(index_url: str, file: str) -> str:
    """The URL of a shard named relative to its index. http(s):// paths are percent-encoded here;
    s3:// keys are sent as given (gpufile encodes them)."""
    base = index_url[:index_url.rindex("/") + 1]
    if index_url.lower().startswith("s3://"):
        return base + file
    from urllib.parse import quote
    return base + quote(file, safe="/")


def _remote_index_sources(index: RemoteFile) -> List[_Source]:
    index_url = index.name
    with index as f:
        size = f.size()
        if size > MAX_HEADER_SIZE:
            raise SafetensorError(f"{index_url}: {size} bytes is too large for an index")
        raw = _read_exactly(f, size, 0)
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise SafetensorError(f"{index_url}: not valid JSON: {e}") from None
    out: List[_Source] = []
    try:
        for file, names in _weight_map(parsed, index_url).items():
            p = _shard_url(index_url, file)
            out.append(_remote_source(p, RemoteFile(p), names))
    except BaseException:
        _close_sources(out)
        raise
    return out


def _close_sources(sources: Iterable[_Source]) -> None:
    for src in sources:
        if src.remote is not None:
            src.remote.close()
