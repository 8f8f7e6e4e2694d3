"""Fuzz target: safetensors headers, as gpufile.safetensors parses them (parse_header, the
check every load, safe_open and read_header goes through). Coverage-guided with atheris
(libFuzzer for Python): the gpufile package is instrumented at import.

Each input is a whole file (8-byte little-endian header length, header, data). Beyond "only
SafetensorError escapes", every input must keep these:
  1. the result does not depend on how much of the file the caller read: the whole file and
     only its first 8 + n bytes (what read_header reads) give the same header or the same error;
  2. a parsed header describes the file: data_start = 8 + n; every tensor has a known dtype,
     a shape of non-negative ints and exactly prod(shape) * itemsize bytes; the tensors, sorted,
     tile the data section with no hole and no overlap; __metadata__ maps str to str;
  3. the header written back (compact JSON, as save_file writes one) parses to the same tensors
     and metadata.

Run (the package installed, e.g. the virtual environment scripts/test.sh makes, plus atheris):
  python tests/fuzz/fuzz_safetensors_header.py -max_total_time=600 tests/fuzz/corpus/safetensors_header
Any libFuzzer flag goes (-runs=0 replays the corpus, -max_len=N, -jobs=N).
"""
import json
import math
import struct
import sys

import atheris

with atheris.instrument_imports(include=["gpufile"]):
    from gpufile import _dtypes
    from gpufile import safetensors as gst


def fail(what: str, data: bytes) -> None:
    raise AssertionError(f"invariant broken: {what}; input {data[:200]!r}")


def parse(prefix: bytes, size: int):
    try:
        return gst.parse_header(prefix, size)
    except gst.SafetensorError as e:
        return str(e)


def check_header(h, n: int, size: int, data: bytes) -> None:
    if h.data_start != 8 + n or h.file_size != size or h.data_start > size:
        fail("data_start is 8 + the header length, within the file", data)
    if h.metadata is not None and not (isinstance(h.metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in h.metadata.items())):
        fail("__metadata__ maps str to str", data)
    at = 0
    for name, t in h.tensors.items():  # in file order
        if name != t.name or name == "__metadata__":
            fail("tensors are keyed by their names", data)
        d = _dtypes.BY_NAME.get(t.dtype)
        if d is None or not all(isinstance(k, int) and k >= 0 for k in t.shape):
            fail("a known dtype and a shape of non-negative ints", data)
        if t.nbytes != math.prod(t.shape) * d.itemsize:
            fail("a tensor holds prod(shape) * itemsize bytes", data)
        if t.begin != at:
            fail("the tensors tile the data section in file order", data)
        at = t.end
    if at != size - h.data_start:
        fail("the tensors cover the whole data section", data)


def written_back(h) -> bytes:
    header = {}
    if h.metadata is not None:
        header["__metadata__"] = h.metadata
    for t in h.tensors.values():
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.begin, t.end]}
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text


def TestOneInput(data: bytes) -> None:
    size = len(data)
    whole = parse(data, size)
    n = struct.unpack("<Q", data[:8])[0] if size >= 8 else 0
    exact = parse(data[:8 + n], size)
    if type(whole) is not type(exact) or (isinstance(whole, str) and whole != exact):
        fail("the same result from the whole file and from its first 8 + n bytes", data)
    if isinstance(whole, str):
        return
    if whole != exact:
        fail("the same header from the whole file and from its first 8 + n bytes", data)
    check_header(whole, n, size, data)
    head = written_back(whole)
    data_len = size - whole.data_start
    again = gst.parse_header(head, len(head) + data_len)
    if again.metadata != whole.metadata or list(again.tensors.values()) != list(whole.tensors.values()):
        fail("the header written back parses to the same tensors and metadata", data)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
