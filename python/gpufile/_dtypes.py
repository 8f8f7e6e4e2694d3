"""The element types of safetensors files and their names in each framework.

One row per safetensors dtype: its size, the DLPack type code, the NumPy dtype (None where NumPy
has none), the CUDA array interface typestr and the torch dtype attribute name.
"""
from __future__ import annotations

from typing import NamedTuple, Optional


class DType(NamedTuple):
    name: str            # as written in a safetensors header
    itemsize: int        # bytes per element
    dlpack_code: int     # DLDataTypeCode
    numpy: Optional[str]
    typestr: Optional[str]
    torch: str


# DLPack codes: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool, 10 float8_e4m3fn,
# 12 float8_e5m2, 14 float8_e8m0fnu.
_ROWS = [
    DType("BOOL", 1, 6, "bool", "|b1", "bool"),
    DType("U8", 1, 1, "uint8", "|u1", "uint8"),
    DType("I8", 1, 0, "int8", "|i1", "int8"),
    DType("F8_E5M2", 1, 12, None, None, "float8_e5m2"),
    DType("F8_E4M3", 1, 10, None, None, "float8_e4m3fn"),
    DType("F8_E8M0", 1, 14, None, None, "float8_e8m0fnu"),
    DType("I16", 2, 0, "int16", "<i2", "int16"),
    DType("U16", 2, 1, "uint16", "<u2", "uint16"),
    DType("F16", 2, 2, "float16", "<f2", "float16"),
    DType("BF16", 2, 4, None, None, "bfloat16"),
    DType("I32", 4, 0, "int32", "<i4", "int32"),
    DType("U32", 4, 1, "uint32", "<u4", "uint32"),
    DType("F32", 4, 2, "float32", "<f4", "float32"),
    DType("C64", 8, 5, "complex64", "<c8", "complex64"),
    DType("F64", 8, 2, "float64", "<f8", "float64"),
    DType("I64", 8, 0, "int64", "<i8", "int64"),
    DType("U64", 8, 1, "uint64", "<u8", "uint64"),
]

BY_NAME = {d.name: d for d in _ROWS}


def from_numpy(dtype) -> DType:
    """The safetensors dtype of a NumPy dtype."""
    for d in _ROWS:
        if d.numpy is not None and d.numpy == str(dtype):
            return d
    raise ValueError(f"NumPy dtype {dtype} has no safetensors equivalent")


def from_torch(dtype) -> DType:
    """The safetensors dtype of a torch dtype."""
    name = str(dtype).replace("torch.", "")
    for d in _ROWS:
        if d.torch == name:
            return d
    raise ValueError(f"torch dtype {dtype} has no safetensors equivalent")
