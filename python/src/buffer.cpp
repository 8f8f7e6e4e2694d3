#include "buffer.hpp"

#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "cuda/driver.hpp"

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

}  // namespace

uint64_t contiguous_bytes(const int64_t* shape, const int64_t* strides_bytes, int ndim,
                          uint64_t itemsize) {
  uint64_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0) throw nb::value_error("negative dimension in the buffer's shape");
    count *= static_cast<uint64_t>(shape[i]);
  }
  if (strides_bytes != nullptr && count > 1) {
    // Row-major compact: the last dimension steps by one item, each outer one by the inner
    // extent. Dimensions of size 1 may carry any stride.
    uint64_t expected = itemsize;
    for (int i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && static_cast<uint64_t>(strides_bytes[i]) != expected)
        throw nb::value_error("the buffer is not C-contiguous: gpufile moves contiguous bytes only");
      expected *= static_cast<uint64_t>(shape[i]);
    }
  }
  return count * itemsize;
}

void synchronize_stream(uintptr_t stream) {
  const cuda::Driver* d = cuda::driver();
  if (d == nullptr) return;
  cuda::CUresult r;
  {
    nb::gil_scoped_release unlocked;
    r = d->StreamSynchronize(reinterpret_cast<cuda::CUstream>(stream));
  }
  if (r != cuda::CUDA_SUCCESS)
    throw std::runtime_error("cannot wait for the buffer's CUDA stream: " + cuda::describe(r));
}

std::unique_ptr<Buffer> Buffer::acquire(nb::handle obj, bool writable) {
  std::unique_ptr<Buffer> b(new Buffer());
  b->owner_ = nb::borrow(obj);
  if (nb::hasattr(obj, "__cuda_array_interface__"))
    b->from_cuda_array_interface(obj, writable);
  else if (PyObject_CheckBuffer(obj.ptr()))
    b->from_buffer_protocol(obj, writable);
  else if (nb::hasattr(obj, "__dlpack__"))
    b->from_dlpack(obj);
  else
    throw nb::type_error(("gpufile cannot use a " + python_type_name(obj) +
                          " as memory: it offers neither __cuda_array_interface__, the buffer "
                          "protocol nor __dlpack__").c_str());
  return b;
}

void Buffer::from_cuda_array_interface(nb::handle obj, bool writable) {
  nb::dict cai = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
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
  }
  const uint64_t itemsize = typestr_itemsize(nb::cast<std::string>(cai["typestr"]));
  nbytes_ = contiguous_bytes(shape.data(), strides.empty() ? nullptr : strides.data(), ndim, itemsize);
  // Version 3: the producer's pending work on `stream` must be complete before the data is used.
  if (cai.contains("stream") && !cai["stream"].is_none())
    synchronize_stream(nb::cast<uintptr_t>(cai["stream"]));
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

void Buffer::from_dlpack(nb::handle obj) {
  // CUDA producers are asked to order their work before the legacy default stream (1), which
  // we then wait for; CPU producers take no stream argument.
  bool on_gpu = false;
  if (nb::hasattr(obj, "__dlpack_device__")) {
    nb::tuple dev = nb::cast<nb::tuple>(obj.attr("__dlpack_device__")());
    int type = nb::cast<int>(dev[0]);
    on_gpu = type == dlpack::kCUDA || type == dlpack::kCUDAManaged;
  }
  nb::object capsule = on_gpu ? obj.attr("__dlpack__")(nb::arg("stream") = 1) : obj.attr("__dlpack__")();
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
  if (on_gpu) synchronize_stream(1);
}

Buffer::~Buffer() {
  if (has_view_) PyBuffer_Release(&view_);
  if (dl_ != nullptr && dl_->deleter != nullptr) dl_->deleter(dl_);
}

}  // namespace gpufile::py
