#include "buffer.hpp"

#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "device_buffer.hpp"

namespace gpufile::py {

namespace {

std::string python_type_name(nb::handle obj) {
  return nb::cast<std::string>(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__name__"));
}

// "<f4", "|u1", "<V2", ...: the item size is the number after the two leading characters.
uint64_t typestr_itemsize(const std::string& typestr) {
  if (typestr.size() < 3) throw nb::value_error(("bad typestr in __cuda_array_interface__: " + typestr).c_str());
  try {
    long v = std::stol(typestr.substr(2));
    if (v <= 0) throw std::invalid_argument("size");
    return static_cast<uint64_t>(v);
  } catch (const std::exception&) {
    throw nb::value_error(("bad typestr in __cuda_array_interface__: " + typestr).c_str());
  }
}

// Attribute and key names used on every call, made once (the GIL serializes the first use) and
// kept for the life of the process: no string is built per call.
struct Names {
  PyObject* cai = PyUnicode_InternFromString("__cuda_array_interface__");
  PyObject* dlpack = PyUnicode_InternFromString("__dlpack__");
  PyObject* dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  PyObject* data = PyUnicode_InternFromString("data");
  PyObject* shape = PyUnicode_InternFromString("shape");
  PyObject* strides = PyUnicode_InternFromString("strides");
  PyObject* typestr = PyUnicode_InternFromString("typestr");
  PyObject* stream = PyUnicode_InternFromString("stream");
};

const Names& names() {
  static const Names n;
  return n;
}

// obj.<name>, or a null object where hasattr() in C (PyObject_HasAttr) would say false: absent,
// or raising while evaluated. Unlike hasattr-then-getattr, a property is evaluated once (CuPy's,
// PyTorch's and DeviceArray's __cuda_array_interface__ build a dict in Python each time) and a
// missing attribute raises no AttributeError to build and clear.
nb::object optional_attr(nb::handle obj, PyObject* name) {
  PyObject* value = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  const int found = PyObject_GetOptionalAttr(obj.ptr(), name, &value);
#else
  const int found = _PyObject_LookupAttr(obj.ptr(), name, &value);
#endif
  if (found < 0) PyErr_Clear();
  return nb::steal(value);
}

// A Python int as an unsigned/signed 64-bit value, or false (no exception left set) for
// anything else, which the caller hands to the general path to report.
bool exact_u64(PyObject* o, uint64_t* out) {
  if (!PyLong_CheckExact(o)) return false;  // not bool, nor int subclasses: the general path
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = v;
  return true;
}

bool exact_i64(PyObject* o, int64_t* out) {
  if (!PyLong_CheckExact(o)) return false;  // not bool, nor int subclasses: the general path
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = v;
  return true;
}

// The item size of a typestr such as "<f4" written plainly (two characters, then only digits),
// or 0 for anything else (the general path parses or refuses it, as before).
uint64_t plain_typestr_itemsize(PyObject* typestr) {
  if (!PyUnicode_Check(typestr)) return 0;
  Py_ssize_t len = 0;
  const char* s = PyUnicode_AsUTF8AndSize(typestr, &len);
  if (s == nullptr) {
    PyErr_Clear();
    return 0;
  }
  if (len < 3 || len > 8) return 0;
  uint64_t v = 0;
  for (Py_ssize_t i = 2; i < len; ++i) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  return v;
}

// A tuple of at most `cap` ints into `out`; false for anything else.
bool int_tuple(PyObject* t, int64_t* out, int cap, int* n) {
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > cap) return false;
  *n = static_cast<int>(PyTuple_GET_SIZE(t));
  for (int i = 0; i < *n; ++i)
    if (!exact_i64(PyTuple_GET_ITEM(t, i), &out[i])) return false;
  return true;
}

// The legacy default stream (CU_STREAM_LEGACY, or 0 where the null stream is the legacy one).
bool is_legacy_stream(uintptr_t stream) { return stream == 0 || stream == 1; }

// A default stream: the legacy one, or the per-thread one (CU_STREAM_PER_THREAD, 2).
bool is_default_stream(uintptr_t stream) { return is_legacy_stream(stream) || stream == 2; }

// Row-major compact: the last dimension steps by one item, each outer one by the inner extent.
// Dimensions of size 1 may carry any stride, and so may every one of an array of 0 or 1 items.
// The shape's dimensions are not negative.
bool strides_are_compact(const int64_t* shape, const int64_t* strides_bytes, int ndim,
                         uint64_t itemsize) {
  uint64_t count = 1;
  for (int i = 0; i < ndim; ++i) count *= static_cast<uint64_t>(shape[i]);
  if (count <= 1) return true;
  uint64_t expected = itemsize;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && static_cast<uint64_t>(strides_bytes[i]) != expected) return false;
    expected *= static_cast<uint64_t>(shape[i]);
  }
  return true;
}

}  // namespace

uint64_t contiguous_bytes(const int64_t* shape, const int64_t* strides_bytes, int ndim,
                          uint64_t itemsize) {
  uint64_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0) throw nb::value_error("negative dimension in the buffer's shape");
    count *= static_cast<uint64_t>(shape[i]);
  }
  if (strides_bytes != nullptr && !strides_are_compact(shape, strides_bytes, ndim, itemsize))
    throw nb::value_error("the buffer is not C-contiguous: gpufile moves contiguous bytes only");
  return count * itemsize;
}

namespace {

// The wait itself, in whatever context is current.
void wait_for_stream(const cuda::Driver& d, uintptr_t stream) {
  const auto handle = reinterpret_cast<cuda::CUstream>(stream);
  // cuStreamQuery and cuStreamSynchronize are documented over the same thing ("all operations
  // in the stream"): an idle stream needs no wait, nor the GIL's release and retaking (costly
  // with other Python threads waiting for it). Not for the legacy stream: synchronizing it may
  // also wait for blocking streams' earlier work (as the test double models it), which a query
  // of it does not promise to cover.
  if (!is_legacy_stream(stream) && d.StreamQuery(handle) == cuda::CUDA_SUCCESS) return;
  cuda::CUresult r;
  {
    nb::gil_scoped_release unlocked;
    r = d.StreamSynchronize(handle);
  }
  if (r != cuda::CUDA_SUCCESS)
    throw std::runtime_error("cannot wait for the buffer's CUDA stream: " + cuda::describe(r));
}

}  // namespace

void synchronize_stream(uintptr_t stream, uint64_t addr) {
  const cuda::Driver* d = cuda::driver();
  if (d == nullptr) return;
  // A stream made by cuStreamCreate carries its context: waiting for it needs none current (as
  // recorded on an H100, tests/support/probe), so it costs no pointer lookup.
  if (!is_default_stream(stream)) {
    wait_for_stream(*d, stream);
    return;
  }
  // The default streams are the current context's, and the producer's is that of its memory.
  // The calling thread may have no context current at all: Python starts threads without one,
  // and CuPy or the CUDA runtime make theirs current only at their first call there (the driver
  // then refused the wait with CUDA_ERROR_INVALID_CONTEXT; found by tests/soak/soak.py on an
  // H100 with CuPy arrays, whose interface names stream 1). The thread's context is put back.
  cuda::MemoryContext owner(reinterpret_cast<const void*>(addr));
  cuda::ScopedContext scope(owner.get());
  wait_for_stream(*d, stream);
}

std::unique_ptr<Buffer> Buffer::acquire(nb::handle obj, bool writable) {
  std::unique_ptr<Buffer> b(new Buffer());
  b->owner_ = nb::borrow(obj);
  if (device_buffer_memory(obj, &b->addr_, &b->nbytes_)) return b;  // what its CAI would say
  if (nb::object cai = optional_attr(obj, names().cai); cai.is_valid()) {
    if (!b->from_cai_fast(cai.ptr(), writable)) b->from_cuda_array_interface(cai, writable);
  } else if (PyObject_CheckBuffer(obj.ptr())) {
    b->from_buffer_protocol(obj, writable);
  } else if (nb::object dlpack = optional_attr(obj, names().dlpack); dlpack.is_valid()) {
    b->from_dlpack(obj, dlpack);
  } else
    throw nb::type_error(("gpufile cannot use a " + python_type_name(obj) +
                          " as memory: it offers neither __cuda_array_interface__, the buffer "
                          "protocol nor __dlpack__").c_str());
  return b;
}

// The common form of the interface, read without allocating: a dict whose data, shape,
// strides, typestr and stream have their usual types. Returns false, with nothing changed or
// waited for, for anything else (odd types, a read-only or non-contiguous array, a typestr
// needing parsing), which the general path then handles or refuses with its messages.
bool Buffer::from_cai_fast(PyObject* cai, bool writable) {
  constexpr int kMaxDims = 16;
  if (!PyDict_CheckExact(cai)) return false;
  const Names& k = names();
  PyObject* data = PyDict_GetItemWithError(cai, k.data);  // borrowed, as every item below
  PyObject* shape_t = data ? PyDict_GetItemWithError(cai, k.shape) : nullptr;
  PyObject* typestr = shape_t ? PyDict_GetItemWithError(cai, k.typestr) : nullptr;
  PyObject* strides_t = typestr ? PyDict_GetItemWithError(cai, k.strides) : nullptr;
  PyObject* stream = typestr ? PyDict_GetItemWithError(cai, k.stream) : nullptr;
  if (PyErr_Occurred()) {  // a key whose hash or comparison raised: the general path says so
    PyErr_Clear();
    return false;
  }
  if (typestr == nullptr || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) return false;
  uint64_t addr = 0;
  if (!exact_u64(PyTuple_GET_ITEM(data, 0), &addr)) return false;
  PyObject* readonly = PyTuple_GET_ITEM(data, 1);
  if (readonly != Py_False && (readonly != Py_True || writable)) return false;
  int64_t shape[kMaxDims], strides[kMaxDims];
  int ndim = 0, nstrides = 0;
  if (!int_tuple(shape_t, shape, kMaxDims, &ndim)) return false;
  const bool compact = strides_t == nullptr || strides_t == Py_None;
  if (!compact && (!int_tuple(strides_t, strides, kMaxDims, &nstrides) || nstrides != ndim))
    return false;
  uint64_t stream_handle = 0;
  const bool has_stream = stream != nullptr && stream != Py_None;
  if (has_stream && !exact_u64(stream, &stream_handle)) return false;
  const uint64_t itemsize = plain_typestr_itemsize(typestr);
  if (itemsize == 0) return false;
  for (int i = 0; i < ndim; ++i)
    if (shape[i] < 0) return false;
  // The general path raises the "not C-contiguous" error.
  if (!compact && !strides_are_compact(shape, strides, ndim, itemsize)) return false;
  nbytes_ = contiguous_bytes(shape, compact ? nullptr : strides, ndim, itemsize);
  addr_ = addr;
  // Version 3: the producer's pending work on `stream` must be complete before the data is used.
  if (has_stream) synchronize_stream(static_cast<uintptr_t>(stream_handle), addr_);
  return true;
}

void Buffer::from_cuda_array_interface(nb::handle cai_obj, bool writable) {
  nb::dict cai = nb::cast<nb::dict>(cai_obj);
  nb::tuple data = nb::cast<nb::tuple>(cai["data"]);
  addr_ = nb::cast<uint64_t>(data[0]);
  if (writable && nb::cast<bool>(data[1]))
    throw nb::value_error("the buffer is read-only (__cuda_array_interface__ data[1] is True)");
  nb::tuple shape_t = nb::cast<nb::tuple>(cai["shape"]);
  const int ndim = static_cast<int>(shape_t.size());
  std::vector<int64_t> shape(ndim), strides;
  for (int i = 0; i < ndim; ++i) shape[i] = nb::cast<int64_t>(shape_t[i]);
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    nb::tuple st = nb::cast<nb::tuple>(cai["strides"]);
    for (size_t i = 0; i < st.size(); ++i) strides.push_back(nb::cast<int64_t>(st[i]));
    if (static_cast<int>(strides.size()) != ndim)
      throw nb::value_error("__cuda_array_interface__ strides and shape differ in length");
  }
  const uint64_t itemsize = typestr_itemsize(nb::cast<std::string>(cai["typestr"]));
  nbytes_ = contiguous_bytes(shape.data(), strides.empty() ? nullptr : strides.data(), ndim, itemsize);
  // Version 3: the producer's pending work on `stream` must be complete before the data is used.
  if (cai.contains("stream") && !cai["stream"].is_none())
    synchronize_stream(nb::cast<uintptr_t>(cai["stream"]), addr_);
}

void Buffer::from_buffer_protocol(nb::handle obj, bool writable) {
  int flags = PyBUF_ND | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    if (writable && PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_ND | PyBUF_STRIDES) == 0) {
      PyBuffer_Release(&view_);
      throw nb::value_error(("the " + python_type_name(obj) + " is read-only: a read needs writable memory").c_str());
    }
    throw nb::value_error(("the " + python_type_name(obj) + " does not export a strided buffer").c_str());
  }
  has_view_ = true;
  if (!PyBuffer_IsContiguous(&view_, 'C'))
    throw nb::value_error("the buffer is not C-contiguous: gpufile moves contiguous bytes only");
  addr_ = reinterpret_cast<uint64_t>(view_.buf);
  nbytes_ = static_cast<uint64_t>(view_.len);
}

void Buffer::from_dlpack(nb::handle obj, nb::handle dlpack_method) {
  // CUDA producers are asked to order their work before the legacy default stream (1), which
  // we then wait for; CPU producers take no stream argument.
  bool on_gpu = false;
  if (nb::object device_of = optional_attr(obj, names().dlpack_device); device_of.is_valid()) {
    nb::tuple dev = nb::cast<nb::tuple>(device_of());
    int type = nb::cast<int>(dev[0]);
    on_gpu = type == dlpack::kCUDA || type == dlpack::kCUDAManaged;
  }
  nb::object capsule = on_gpu ? dlpack_method(nb::arg("stream") = 1) : dlpack_method();
  if (!PyCapsule_IsValid(capsule.ptr(), dlpack::kCapsuleName))
    throw nb::type_error("__dlpack__ did not return an unused \"dltensor\" capsule");
  dl_ = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), dlpack::kCapsuleName));
  // The tensor is ours now: the capsule must not call its deleter as well.
  PyCapsule_SetName(capsule.ptr(), dlpack::kUsedCapsuleName);
  const dlpack::Tensor& t = dl_->dl_tensor;
  const uint64_t itemsize = (static_cast<uint64_t>(t.dtype.bits) * t.dtype.lanes + 7) / 8;
  std::vector<int64_t> strides_bytes;
  if (t.strides != nullptr)
    for (int i = 0; i < t.ndim; ++i) strides_bytes.push_back(t.strides[i] * static_cast<int64_t>(itemsize));
  nbytes_ = contiguous_bytes(t.shape, t.strides ? strides_bytes.data() : nullptr, t.ndim, itemsize);
  addr_ = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  if (on_gpu) synchronize_stream(1, addr_);
}

Buffer::~Buffer() {
  if (has_view_) PyBuffer_Release(&view_);
  if (dl_ != nullptr && dl_->deleter != nullptr) dl_->deleter(dl_);
}

uint64_t span(const Buffer& b, std::optional<uint64_t> size, uint64_t buf_offset) {
  if (buf_offset > b.nbytes())
    throw nb::value_error(("buf_offset " + std::to_string(buf_offset) + " is past the end of the " +
                           std::to_string(b.nbytes()) + "-byte buffer").c_str());
  const uint64_t room = b.nbytes() - buf_offset;
  if (!size) return room;
  if (*size > room)
    throw nb::value_error(("size " + std::to_string(*size) + " does not fit the buffer: " +
                           std::to_string(room) + " bytes from buf_offset " +
                           std::to_string(buf_offset)).c_str());
  return *size;
}

}  // namespace gpufile::py
