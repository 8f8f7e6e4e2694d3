"""Hostile and malformed safetensors files fed to gpufile.safetensors.

Covers:
* a corpus of hand-made bad files (built in tmp_path): read_header, load_file(framework="numpy")
  and safe_open must each raise SafetensorError with a message naming the problem;
* headers that parse but whose tensors NumPy cannot hold, and bad model.safetensors.index.json;
* headers that gpufile and the `safetensors` package should agree on accepting or rejecting
  (known disagreements are marked xfail, with the reason);
* hypothesis fuzzing: random bytes and random near-valid JSON headers as whole files; valid files
  with a byte flipped, inserted or deleted, or truncated, in the length or the header. Anything
  that parses must describe tensors tiling the data section, and load or raise SafetensorError;
* round trips with the `safetensors` package both ways, and byte-identical files without metadata;
* safe_open().get_slice() against NumPy basic indexing (ints and step-1 slices).

Run: GPUFILE_CUDA_LIBRARY=<build>/tests/support/fakecuda/libcuda.so.1 PYTHONPATH=<build>/python \
     python3 -m pytest tests/python/test_safetensors_hostile.py
"""
from __future__ import annotations

import json
import math
import re
import struct

import numpy as np
import pytest
import safetensors
import safetensors.numpy as st_numpy
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpufile import safetensors as gst
from gpufile._dtypes import BY_NAME
from gpufile.safetensors import MAX_HEADER_SIZE, SafetensorError

FUZZ = settings(max_examples=300, deadline=None, database=None)

NUMPY_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "float16", "int32", "uint32",
                "float32", "float64", "int64", "uint64", "complex64"]
SAFETENSORS_DTYPE = {d.numpy: d.name for d in BY_NAME.values() if d.numpy}

ENTRY_POINTS = {
    "read_header": gst.read_header,
    "load_file": lambda path: gst.load_file(path, framework="numpy"),
    "safe_open": lambda path: gst.safe_open(path, framework="numpy").close(),
}


# ---- building files ------------------------------------------------------------------------------

def st_file(header, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors file: the 8-byte little-endian header length, the header, the data.
    `header` is a dict (written as compact JSON), a str or bytes; `length` overrides the length."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    return struct.pack("<Q", len(header) if length is None else length) + header + data


_DROP = object()


def entry(**fields) -> dict:
    """A header entry, F32 [1] at [0, 4), with `fields` replaced (or removed where _DROP)."""
    e = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    e.update(fields)
    return {k: v for k, v in e.items() if v is not _DROP}


def one(**fields) -> bytes:
    """A file of one tensor "t" (see entry()) and 4 data bytes."""
    return st_file({"t": entry(**fields)}, bytes(4))


def two(a_offsets, b_offsets, data_len: int) -> bytes:
    """A file of two F32 [1] tensors "a" and "b" at the given offsets."""
    return st_file({"a": entry(data_offsets=a_offsets), "b": entry(data_offsets=b_offsets)},
                   bytes(data_len))


def write(path, content: bytes):
    path.write_bytes(content)
    return path


def get_tensors(path) -> dict:
    """Every tensor of a file through safe_open().get_tensor()."""
    with gst.safe_open(path, framework="numpy") as f:
        return {n: f.get_tensor(n) for n in f.keys()}


_VALID = st_numpy.save({"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 3), np.int16)})
_VALID_HEADER_END = 8 + struct.unpack("<Q", _VALID[:8])[0]
_T_U8 = '"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'


# ---- the corpus ----------------------------------------------------------------------------------

def bad(name: str, content: bytes, message: str):
    return pytest.param(content, message, id=name)


CORPUS = [
    # the length prefix
    bad("empty", b"", "file too small"),
    bad("7-bytes", b"\x02" * 7, "file too small"),
    bad("length-past-eof", st_file("{}", length=100), "runs past the end of the 10-byte file"),
    bad("length-over-limit", struct.pack("<Q", MAX_HEADER_SIZE + 1) + b"{}", "exceeds the limit"),
    bad("length-2**64-1", b"\xff" * 8 + b"{}", "exceeds the limit"),
    bad("truncated-in-header", _VALID[:_VALID_HEADER_END - 5], "runs past the end"),
    # the header text
    bad("length-0", st_file(b""), "not a JSON object"),
    bad("not-utf8", st_file(b'{"\xff\xfe":1}'), "not valid JSON"),
    bad("not-json", st_file("{not json}"), "not valid JSON"),
    bad("trailing-garbage", st_file("{}}"), "not valid JSON"),
    bad("trailing-nul", st_file(b"{}\0"), "not valid JSON"),
    bad("list", st_file("[]"), "not a JSON object"),
    bad("number", st_file("3"), "not a JSON object"),
    bad("string", st_file('"{}"'), "not a JSON object"),
    bad("byte-order-mark", st_file(b"\xef\xbb\xbf{}"), "not a JSON object"),
    bad("deep-list", st_file("[" * 100_000), "not a JSON object"),
    bad("deep-list-in-object", st_file('{"a":' + "[" * 100_000 + "]" * 100_000 + "}"),
        "not valid JSON"),
    bad("deep-objects", st_file('{"a":' * 100_000 + "1" + "}" * 100_000), "not valid JSON"),
    bad("integer-of-5000-digits", st_file('{"t":{"shape":[' + "9" * 5000 + "]}}"), "not valid JSON"),
    bad("duplicate-tensor", st_file("{" + _T_U8 + "," + _T_U8 + "}", b"x"), "duplicate key 't'"),
    bad("duplicate-field", st_file('{"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                   b"x"), "duplicate key 'dtype'"),
    # __metadata__
    *(bad(f"metadata-{name}", st_file({"__metadata__": m, "t": entry()}, bytes(4)),
          "__metadata__ must map strings to strings")
      for name, m in [("list", []), ("string", "x"), ("int-value", {"a": 1}),
                      ("null-value", {"a": None}), ("nested", {"a": {"b": "c"}})]),
    # one entry
    *(bad(f"entry-{name}", st_file({"t": e}, bytes(4)), "its header entry is not an object")
      for name, e in [("list", [1]), ("string", "F32"), ("null", None), ("number", 4)]),
    bad("dtype-missing", one(dtype=_DROP), "missing or non-string dtype"),
    bad("dtype-int", one(dtype=3), "missing or non-string dtype"),
    bad("dtype-null", one(dtype=None), "missing or non-string dtype"),
    *(bad(f"dtype-{d}", one(dtype=d), f"unknown or unsupported dtype {d!r}")
      for d in ["F4", "X9", "f32", "F32 ", ""]),
    *(bad(f"shape-{name}", one(**s), "shape must be a list of non-negative integers")
      for name, s in [("missing", {"shape": _DROP}), ("int", {"shape": 1}),
                      ("string", {"shape": "[1]"}), ("object", {"shape": {"0": 1}}),
                      ("negative", {"shape": [-1]}), ("negative-pair", {"shape": [-1, -1]}),
                      ("bool", {"shape": [True]}), ("float", {"shape": [1.0]}),
                      ("string-dim", {"shape": ["1"]}), ("null-dim", {"shape": [None]}),
                      ("nested", {"shape": [[1]]})]),
    *(bad(f"offsets-{name}", one(dtype="U8", shape=[4], data_offsets=o),
          "data_offsets must be [begin, end] with 0 <= begin <= end")
      for name, o in [("missing", _DROP), ("empty", []), ("one", [4]), ("three", [0, 4, 4]),
                      ("negative", [-4, 0]), ("negative-end", [0, -4]), ("reversed", [4, 0]),
                      ("float", [0.0, 4.0]), ("bool", [False, True]), ("string", ["0", "4"]),
                      ("null", None), ("object", {"begin": 0, "end": 4})]),
    bad("span-too-small", one(shape=[2]), "shape [2] of F32 is 8 bytes, but data_offsets span 4"),
    bad("span-too-large", st_file({"t": entry(data_offsets=[0, 8])}, bytes(8)),
        "but data_offsets span 8"),
    bad("huge-shape-product", one(shape=[2**62, 2**62]), "is too large"),
    # the tensors together
    bad("overlap", two([0, 4], [2, 6], 6), "overlaps the tensor before it"),
    bad("same-place", two([0, 4], [0, 4], 4), "overlaps the tensor before it"),
    bad("hole-between", two([0, 4], [8, 12], 12), "leaves a hole before it"),
    bad("hole-at-start", st_file({"t": entry(data_offsets=[4, 8])}, bytes(8)), "leaves a hole"),
    bad("empty-tensor-past-end", st_file({"a": entry(), "z": entry(shape=[0], data_offsets=[9, 9])},
                                         bytes(4)), "'z' at [9, 9) leaves a hole"),
    bad("offsets-past-2**64", one(data_offsets=[2**64, 2**64 + 4]), "leaves a hole"),
    bad("trailing-bytes", st_file({"t": entry()}, bytes(8)),
        "the tensors cover 4 bytes but the data section holds 8"),
    bad("past-eof", one(shape=[4], data_offsets=[0, 16]),
        "the tensors cover 16 bytes but the data section holds 4"),
    bad("no-tensors-but-data", st_file({"__metadata__": {}}, bytes(8)),
        "the tensors cover 0 bytes but the data section holds 8"),
    bad("truncated-data", _VALID[:-3], "the tensors cover 28 bytes but the data section holds 25"),
    bad("header-only", _VALID[:_VALID_HEADER_END], "but the data section holds 0"),
]


@pytest.mark.parametrize("load", list(ENTRY_POINTS.values()), ids=list(ENTRY_POINTS))
@pytest.mark.parametrize("content, message", CORPUS)
def test_bad_file_is_a_clear_error(tmp_path, content, message, load):
    path = write(tmp_path / "bad.safetensors", content)
    with pytest.raises(SafetensorError, match=re.escape(message)):
        load(path)


def test_prefix_shorter_than_the_stated_header():
    with pytest.raises(SafetensorError, match="shorter than its stated length"):
        gst.parse_header(st_file("{}")[:9], 10)


def test_file_truncated_after_safe_open(tmp_path):
    """A file cut short after its header was checked: the reads past its new end fail clearly."""
    path = tmp_path / "x.safetensors"
    st_numpy.save_file({"a": np.arange(1000, dtype=np.float32)}, path)
    with gst.safe_open(path, framework="numpy") as f:
        path.write_bytes(path.read_bytes()[:-100])
        for read in (lambda: f.get_tensor("a"), lambda: f.get_slice("a")[990:]):
            with pytest.raises(SafetensorError, match="truncated while loading"):
                read()
        assert f.get_slice("a")[:10].tolist() == list(range(10))


def test_file_without_metadata_loads(tmp_path):
    """The common case: the safetensors package writes no __metadata__ unless given some."""
    path = write(tmp_path / "x.safetensors", st_numpy.save({"a": np.arange(3, dtype=np.uint8)}))
    assert gst.read_header(path).metadata is None
    assert gst.load_file(path, framework="numpy")["a"].tolist() == [0, 1, 2]


def test_an_empty_tensor_at_a_tensors_offset_comes_first(tmp_path):
    """An empty tensor may share its offset with the tensor after it, in any header order; the
    header then lists it first, in the order the tensors tile the data section (found by
    tests/fuzz: it came second, after the tensor it precedes)."""
    header = {"s": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},
              "e": {"dtype": "U8", "shape": [0, 4], "data_offsets": [0, 0]}}
    path = write(tmp_path / "x.safetensors", st_file(header, bytes(range(8))))
    h = gst.read_header(path)
    assert list(h.tensors) == ["e", "s"]
    check_tiling(h)
    got = gst.load_file(path, framework="numpy")
    assert got["e"].shape == (0, 4) and got["s"].tobytes() == bytes(range(8))


# Headers the format allows (their byte counts match) but that NumPy cannot hold: loading must
# still fail with SafetensorError. The safetensors package rejects the first two when parsing
# (a dimension over usize, a shape product that overflows).
@pytest.mark.parametrize("shape", [[2**64, 0], [2**62, 2**62, 0], [2**63, 0], [1] * 65],
                         ids=["dim-2**64", "product-overflow", "dim-2**63", "65-dims"])
def test_shape_numpy_cannot_hold_is_a_clear_error(tmp_path, shape):
    n = math.prod(shape)
    path = write(tmp_path / "x.safetensors",
                 st_file({"t": entry(dtype="U8", shape=shape, data_offsets=[0, n])}, bytes(n)))
    for load in (lambda: gst.load_file(path, framework="numpy"),
                 lambda: gst.load_file(path, framework="numpy", views=True),
                 lambda: get_tensors(path)):
        with pytest.raises(SafetensorError):
            load()


@pytest.mark.parametrize("index, message", [
    ("[" * 100_000, "not valid JSON"),
    ('{"weight_map":' * 100_000, "not valid JSON"),
    (b"\xff\xfe{", "not valid JSON"),
    ("[]", "no weight_map"),
    ('{"weight_map": {"a": 1}}', "no weight_map"),
    ('{"weight_map": {"a": "../x.safetensors"}}', "leaves the checkpoint's directory"),
    ('{"weight_map": {"a": "/x.safetensors"}}', "leaves the checkpoint's directory"),
], ids=["deep-list", "deep-objects", "not-utf8", "list", "non-string-file", "dotdot", "absolute"])
def test_bad_index_is_a_clear_error(tmp_path, index, message):
    path = tmp_path / "model.safetensors.index.json"
    path.write_bytes(index if isinstance(index, bytes) else index.encode())
    with pytest.raises(SafetensorError, match=re.escape(message)):
        gst.load_file(path, framework="numpy")


# ---- agreement with the safetensors package --------------------------------------------------------

def _differs(reason):
    return pytest.mark.xfail(raises=AssertionError, strict=True, reason=reason)


_T_F32 = '"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'


@pytest.mark.parametrize("header", [
    pytest.param("{" + _T_F32 + "}   ", id="trailing-spaces"),
    pytest.param('{\n\t"t" : {"dtype":"F32", "shape":[1], "data_offsets":[0,4], "x":[{}]}}',
                 id="inner-whitespace-and-unknown-field"),
    pytest.param('{"__metadata__":null,' + _T_F32 + "}", id="metadata-null"),
    pytest.param('{"__metadata__":{},' + _T_F32 + "}", id="metadata-empty"),
    pytest.param("  {" + _T_F32 + "}", id="leading-spaces", marks=_differs(
        "gpufile follows the format text (the header MUST begin with '{'); safetensors 0.8 "
        "accepts leading whitespace")),
    pytest.param("\n{" + _T_F32 + "}", id="leading-newline", marks=_differs(
        "as leading-spaces")),
    pytest.param('{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":NaN}}', id="NaN",
                 marks=_differs("Python's json takes NaN/Infinity; serde_json refuses them")),
    pytest.param('{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
                 id="lone-surrogate-name",
                 marks=_differs("Python's json takes lone surrogate escapes; serde_json refuses them")),
])
def test_accepts_what_the_safetensors_package_accepts(tmp_path, header):
    path = write(tmp_path / "x.safetensors", st_file(header, bytes(4)))
    try:
        st_numpy.load_file(path)
        theirs = True
    except Exception:  # noqa: BLE001 - any refusal counts
        theirs = False
    try:
        gst.load_file(path, framework="numpy")
        ours = True
    except SafetensorError:
        ours = False
    assert ours == theirs


# ---- fuzzing -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


def check_tiling(h: gst.Header) -> None:
    """The parse's invariants: tensors in file order, tiling the data section exactly."""
    assert 8 <= h.data_start <= min(h.file_size, 8 + MAX_HEADER_SIZE)
    assert h.metadata is None or all(isinstance(k, str) and isinstance(v, str)
                                     for k, v in h.metadata.items())
    infos = list(h.tensors.values())
    at = 0
    for t in infos:  # in the order given: the order they tile the data section
        assert t.begin == at
        assert t.nbytes == math.prod(t.shape) * BY_NAME[t.dtype].itemsize
        at = t.end
    assert at == h.file_size - h.data_start


def check_loads(path, h: gst.Header) -> None:
    """Loading a file that parsed gives its data-section bytes, or raises SafetensorError."""
    raw = path.read_bytes()
    want = {n: raw[h.data_start + t.begin:h.data_start + t.end] for n, t in h.tensors.items()}
    try:
        got = gst.load_file(path, framework="numpy")
    except SafetensorError:  # e.g. BF16, which NumPy lacks
        return
    assert list(got) == list(h.tensors)
    for n, x in got.items():
        assert x.shape == h.tensors[n].shape and x.tobytes() == want[n]
    with gst.safe_open(path, framework="numpy") as f:
        assert f.keys() == list(h.tensors) and f.metadata() == h.metadata
    assert {n: x.tobytes() for n, x in get_tensors(path).items()} == want


def probe(path, content: bytes) -> bool:
    """`content` as a file: every entry point raises SafetensorError (-> False), or it parses to
    a header satisfying check_tiling and loads as check_loads says (-> True)."""
    write(path, content)
    try:
        h = gst.read_header(path)
    except SafetensorError:
        for load in ENTRY_POINTS.values():
            with pytest.raises(SafetensorError):
                load(path)
        return False
    assert gst.parse_header(content, len(content)) == h
    check_tiling(h)
    check_loads(path, h)
    return True


names = st.text(st.characters(exclude_categories=("Cs",)), max_size=6).filter(
    lambda s: s != "__metadata__")
model_names = st.from_regex(r"[a-z][a-z0-9_.]{0,20}", fullmatch=True)  # e.g. "layers.0.w"
metadatas = st.none() | st.dictionaries(names, st.text(max_size=6), max_size=3)
arrays = st.sampled_from(NUMPY_DTYPES).flatmap(lambda d: hnp.arrays(
    d, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
tensor_dicts = st.dictionaries(names, arrays, max_size=4)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10)
small_ints = st.integers(-2, 12)
entries = st.fixed_dictionaries({}, optional={
    "dtype": st.sampled_from(["U8", "I16", "F32", "C64", "BF16", "F4", "x"]) | json_values,
    "shape": st.lists(small_ints, max_size=3) | json_values,
    "data_offsets": st.lists(small_ints, min_size=2, max_size=2) | json_values,
})
headers = st.dictionaries(names | st.just("__metadata__"), entries | json_values, max_size=4)


@FUZZ
@given(content=st.binary(max_size=128)
       | st.builds(lambda n, rest: struct.pack("<Q", n) + rest,
                   st.integers(0, 2**64 - 1) | st.integers(0, 64), st.binary(max_size=64)))
def test_fuzz_random_bytes(scratch, content):
    event("parsed" if probe(scratch / "random.safetensors", content) else "refused")


@FUZZ
@given(header=headers, data=st.binary(max_size=40))
def test_fuzz_random_headers(scratch, header, data):
    event("parsed" if probe(scratch / "header.safetensors", st_file(header, data)) else "refused")


@st.composite
def mutated_files(draw):
    """(a valid file of the safetensors package, that file hit once in its length or header)."""
    good = st_numpy.save(draw(st.dictionaries(model_names, arrays, min_size=1, max_size=4)),
                         metadata=draw(st.none() | st.dictionaries(model_names, model_names)))
    end = 8 + struct.unpack("<Q", good[:8])[0]  # header end; the length prefix is in [0, 8)
    at = draw(st.sampled_from(range(end)))  # uniform: st.integers favours the first bytes
    op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
    if op == "flip":
        mask = draw(st.sampled_from([1 << i for i in range(8)]) | st.integers(1, 255))
        return good, good[:at] + bytes([good[at] ^ mask]) + good[at + 1:]
    if op == "insert":
        return good, good[:at] + draw(st.binary(min_size=1, max_size=4)) + good[at:]
    if op == "delete":
        return good, good[:at] + good[at + draw(st.integers(1, 4)):]
    return good, good[:at]


@FUZZ
@given(files=mutated_files())
def test_fuzz_mutated_valid_file(scratch, files):
    good, bad = files
    assert probe(scratch / "good.safetensors", good)
    event("parsed" if probe(scratch / "mutated.safetensors", bad) else "refused")


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for n, x in want.items():
        y = got[n]
        assert (y.dtype, y.shape, y.tobytes()) == (x.dtype, x.shape, x.tobytes()), n


@FUZZ
@given(tensors=tensor_dicts, metadata=metadatas)
def test_round_trip_with_the_safetensors_package(scratch, tensors, metadata):
    assume(tensors or metadata != {})  # safetensors 0.8 writes '{},"__metadata__":{}}' for these
    ours, theirs = scratch / "ours.safetensors", scratch / "theirs.safetensors"
    gst.save_file(tensors, ours, metadata=metadata)
    st_numpy.save_file(tensors, theirs, metadata=metadata)
    assert_same(st_numpy.load_file(ours), tensors)
    assert_same(gst.load_file(theirs, framework="numpy"), tensors)
    assert_same(gst.load_file(ours, framework="numpy", views=True), tensors)
    with safetensors.safe_open(ours, framework="np") as f:
        assert f.metadata() == metadata
    assert gst.read_header(theirs).metadata == metadata
    if metadata is None:
        assert ours.read_bytes() == theirs.read_bytes()


def test_no_tensors_and_empty_metadata(tmp_path):
    """The case the round trip leaves out: gpufile's file of it must load with both."""
    path = tmp_path / "x.safetensors"
    gst.save_file({}, path, metadata={})
    assert st_numpy.load_file(path) == {} and gst.load_file(path, framework="numpy") == {}
    assert gst.read_header(path).metadata == {}


# ---- get_slice -------------------------------------------------------------------------------------

def indices(n: int):
    """One index for a dimension of size n: an int (in range or not), or a step-1 slice."""
    ends = st.none() | st.integers(-n - 2, n + 2)
    return st.integers(-n - 2, n + 1) | st.builds(slice, ends, ends, st.sampled_from([None, 1]))


@st.composite
def sliced_arrays(draw):
    x = draw(st.sampled_from(NUMPY_DTYPES).flatmap(lambda d: hnp.arrays(
        d, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))))
    key = tuple(draw(indices(n)) for n in x.shape[:draw(st.integers(0, x.ndim))])
    if len(key) == 1 and draw(st.booleans()):
        key = key[0]
    return x, key


@FUZZ
@given(case=sliced_arrays(), before=arrays, metadata=metadatas)
def test_get_slice_matches_numpy(scratch, case, before, metadata):
    x, key = case
    path = scratch / "sliced.safetensors"
    # "a" goes first where its dtype is as large as x's or larger: then x starts past offset 0
    st_numpy.save_file({"a": before, "x": x}, path, metadata=metadata)
    with gst.safe_open(path, framework="numpy") as f:
        s = f.get_slice("x")
        assert (s.get_shape(), s.get_dtype()) == (list(x.shape), SAFETENSORS_DTYPE[x.dtype.name])
        try:
            want = np.asarray(x[key])
        except IndexError:
            with pytest.raises(IndexError):
                s[key]
            return
        got = s[key]
        assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())


def test_get_slice_refuses_steps(tmp_path):
    path = tmp_path / "x.safetensors"
    st_numpy.save_file({"x": np.arange(6, dtype=np.int32)}, path, metadata={"k": "v"})
    with gst.safe_open(path, framework="numpy") as f:
        with pytest.raises(SafetensorError, match="step 1 only"):
            f.get_slice("x")[::2]
        assert f.get_slice("x")[4:1].shape == (0,)
