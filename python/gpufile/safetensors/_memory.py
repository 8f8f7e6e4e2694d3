"""The memory tensors are loaded into: the target of a load (framework and device), the
allocations and views made for it, the device number a read plan needs for a destination, and
the waits for GPU work still using memory that IO is about to read or write. torch, NumPy,
DeviceArray and _scatter are imported by the call that needs them, never at import."""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Optional, Tuple

from .. import _dtypes
from .._gpufile import DeviceBuffer
from ._header import SafetensorError, TensorInfo


class _Target(NamedTuple):
    framework: str      # "pt" | "numpy" | "dlpack"
    cuda: bool
    ordinal: int        # CUDA device number
    torch_device: Any   # torch.device for "pt", else None


def _target(framework: str, device: Any) -> _Target:
    if framework in ("np",):
        framework = "numpy"
    if framework not in ("pt", "torch", "numpy", "dlpack"):
        raise SafetensorError(f"unknown framework {framework!r}: use 'pt', 'numpy' or 'dlpack'")
    framework = "pt" if framework == "torch" else framework
    text = str(device) if not isinstance(device, int) else f"cuda:{device}"
    if text == "cpu":
        cuda, index = False, 0
    elif text == "cuda" or text.startswith("cuda:"):
        cuda = True
        try:
            index = int(text[5:]) if text.startswith("cuda:") else 0
        except ValueError:
            raise SafetensorError(f"bad device {device!r}") from None
    else:
        raise SafetensorError(f"unsupported device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")
    if framework == "numpy" and cuda:
        raise SafetensorError("framework 'numpy' loads into host memory only: use device='cpu'")
    if framework == "dlpack" and not cuda:
        raise SafetensorError("framework 'dlpack' loads into GPU memory: use device='cuda:N'")
    torch_device = None
    if framework == "pt":
        import torch
        torch_device = torch.device("cuda", index) if cuda else torch.device("cpu")
    return _Target(framework, cuda, index, torch_device)


def _torch_dtype(name: str):
    import torch
    dt = getattr(torch, _dtypes.BY_NAME[name].torch, None)
    if dt is None:
        raise SafetensorError(f"this torch has no {_dtypes.BY_NAME[name].torch} for {name}")
    return dt


def _numpy_dtype(name: str):
    import numpy as np
    d = _dtypes.BY_NAME[name]
    if d.numpy is None:
        raise SafetensorError(f"NumPy has no dtype for {name}: load it with framework='pt' or 'dlpack'")
    return np.dtype(d.numpy)


class _Dest(NamedTuple):
    obj: Any      # what the caller gets (it keeps the memory alive while IO runs)
    ptr: int      # where its bytes go


def _allocate(t: _Target, dtype: str, shape: Tuple[int, ...]) -> _Dest:
    """A new, owning array of `shape` for one tensor."""
    try:
        return _allocate_unchecked(t, dtype, shape)
    except (ValueError, OverflowError) as e:  # shapes the framework cannot represent (not OOM)
        if isinstance(e, SafetensorError):
            raise
        raise SafetensorError(f"cannot make a {dtype} array of shape {list(shape)}: {e}") from None


def _allocate_unchecked(t: _Target, dtype: str, shape: Tuple[int, ...]) -> _Dest:
    if t.framework == "pt":
        import torch
        x = torch.empty(shape, dtype=_torch_dtype(dtype), device=t.torch_device)
        return _Dest(x, x.data_ptr())
    if t.framework == "numpy":
        import numpy as np
        x = np.empty(shape, dtype=_numpy_dtype(dtype))
        return _Dest(x, x.ctypes.data)
    from .._arrays import DeviceArray
    x = DeviceArray.empty(shape, dtype, t.ordinal)
    return _Dest(x, x.ptr)


def _region(t: _Target, nbytes: int) -> _Dest:
    """One untyped allocation that views are cut from."""
    if t.framework == "pt":
        import torch
        x = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=t.torch_device)
        return _Dest(x, x.data_ptr())
    if t.framework == "numpy":
        import numpy as np
        x = np.empty(max(nbytes, 1), dtype=np.uint8)
        return _Dest(x, x.ctypes.data)
    x = DeviceBuffer(nbytes, t.ordinal)
    return _Dest(x, x.ptr)


def _view(t: _Target, region: Any, info: TensorInfo, base: int) -> Any:
    """The tensor `info` as a view into `region`, whose byte 0 is data-section offset `base`."""
    lo, hi = info.begin - base, info.end - base
    try:
        if t.framework == "pt":
            return region[lo:hi].view(_torch_dtype(info.dtype)).view(info.shape)
        if t.framework == "numpy":
            return region[lo:hi].view(_numpy_dtype(info.dtype)).reshape(info.shape)
    except (ValueError, OverflowError, RuntimeError) as e:  # a shape the framework cannot hold
        if isinstance(e, SafetensorError):
            raise
        raise SafetensorError(f"tensor {info.name!r}: cannot view as {info.dtype} {list(info.shape)}: {e}") from None
    from .._arrays import DeviceArray
    return DeviceArray(region, lo, info.shape, info.dtype)


def _settle_allocations(t: _Target) -> None:
    # The caching allocator may hand out memory that kernels queued on the current stream still
    # use; gpufile's IO is ordered on no stream of the caller, so let that work finish first.
    if t.framework == "pt" and t.cuda:
        import torch
        torch.cuda.current_stream(t.torch_device).synchronize()


def _settle_sources(tensors: Iterable[Any]) -> None:
    # Tensors produced by kernels still running must be complete before their bytes are read.
    seen = set()
    for x in tensors:
        dev = getattr(x, "device", None)
        if getattr(dev, "type", None) == "cuda" and dev not in seen:
            import torch
            torch.cuda.synchronize(dev)
            seen.add(dev)


def _device_number(t: _Target) -> int:
    from .._scatter import HOST
    return t.ordinal if t.cuda else HOST


def _device_of(x: Any) -> Optional[int]:
    """The CUDA device number of a destination's memory, _scatter.HOST for host memory, None
    where that is not known (its part is then read run by run)."""
    from .. import _scatter
    from .._arrays import DeviceArray
    mod = type(x).__module__
    if mod.startswith("torch"):
        if x.device.type == "cpu":
            return _scatter.HOST
        return x.device.index if x.device.type == "cuda" and x.device.index is not None else None
    if mod.startswith("numpy"):
        return _scatter.HOST
    if isinstance(x, DeviceArray):
        return x.device
    try:  # __cuda_array_interface__ memory: ask the driver where it is
        from .._gpufile import _memory_of
        return int(_memory_of(x)[2])
    except Exception:  # noqa: BLE001 - an object the driver cannot place keeps the plain path
        return None
