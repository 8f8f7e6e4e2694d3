#include "device_buffer.hpp"

#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "buffer.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "dlpack.hpp"
#include "errors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace gpufile::py {
namespace {

const cuda::Driver& need_driver() {
  const cuda::Driver* d = cuda::driver();
  if (d == nullptr) raise_message("no CUDA driver: " + cuda::why_no_driver());
  return *d;
}

class DeviceBuffer {
 public:
  DeviceBuffer(uint64_t nbytes, int device) : nbytes_(nbytes), device_(device) {
    const cuda::Driver& d = need_driver();
    if (device < 0 || device >= d.device_count)
      throw nb::value_error(("device " + std::to_string(device) + " does not exist (" +
                             std::to_string(d.device_count) + " CUDA devices)").c_str());
    cuda::CUdevice dev = 0;
    cuda::CUresult r = d.DeviceGet(&dev, device);
    if (r == cuda::CUDA_SUCCESS) r = d.DevicePrimaryCtxRetain(&ctx_, dev);
    if (r != cuda::CUDA_SUCCESS) raise(Error::cu(r), "cuDevicePrimaryCtxRetain");
    if (nbytes == 0) return;
    cuda::ScopedContext scope(ctx_);
    cuda::CUdeviceptr p = 0;
    {
      nb::gil_scoped_release unlocked;
      r = d.MemAlloc(&p, nbytes);
    }
    if (r != cuda::CUDA_SUCCESS) {
      d.DevicePrimaryCtxRelease(dev);
      raise(Error::cu(r), ("cuMemAlloc of " + std::to_string(nbytes) + " bytes").c_str());
    }
    ptr_ = p;
  }

  ~DeviceBuffer() {
    const cuda::Driver* d = cuda::driver();
    if (d == nullptr || ctx_ == nullptr) return;
    nb::gil_scoped_release unlocked;
    if (ptr_ != 0) {
      cuda::ScopedContext scope(ctx_);
      d->MemFree(ptr_);
    }
    cuda::CUdevice dev = 0;
    if (d->DeviceGet(&dev, device_) == cuda::CUDA_SUCCESS) d->DevicePrimaryCtxRelease(dev);
  }

  uintptr_t ptr() const { return ptr_; }
  uint64_t nbytes() const { return nbytes_; }
  int device() const { return device_; }

  // Synchronous copies between this buffer (from `offset`) and host memory (all of `host`).
  void copy(nb::handle host, uint64_t offset, bool to_host) {
    auto b = Buffer::acquire(host, to_host);
    if (offset > nbytes_ || b->nbytes() > nbytes_ - offset)
      throw nb::value_error(("the host buffer's " + std::to_string(b->nbytes()) +
                             " bytes do not fit the device buffer at offset " +
                             std::to_string(offset)).c_str());
    if (b->nbytes() == 0) return;
    const cuda::Driver& d = need_driver();
    cuda::CUresult r;
    {
      nb::gil_scoped_release unlocked;
      cuda::ScopedContext scope(ctx_);
      r = to_host ? d.MemcpyDtoH(reinterpret_cast<void*>(b->addr()), ptr_ + offset, b->nbytes())
                  : d.MemcpyHtoD(ptr_ + offset, reinterpret_cast<const void*>(b->addr()), b->nbytes());
    }
    if (r != cuda::CUDA_SUCCESS) raise(Error::cu(r), to_host ? "cuMemcpyDtoH" : "cuMemcpyHtoD");
  }

  // device_buffer_memory() says the same without the dict: change both together.
  nb::dict cuda_array_interface() const {
    nb::dict d;
    d["shape"] = nb::make_tuple(nbytes_);
    d["typestr"] = "|u1";
    d["data"] = nb::make_tuple(ptr_, false);
    d["strides"] = nb::none();
    d["version"] = 3;
    d["stream"] = nb::none();  // gpufile's IO finished before it returned: nothing to wait for
    return d;
  }

 private:
  cuda::CUcontext ctx_ = nullptr;
  cuda::CUdeviceptr ptr_ = 0;
  uint64_t nbytes_ = 0;
  int device_ = 0;
};

// One exported view: the tensor, its shape, and a strong reference to the buffer's Python object.
struct Export {
  dlpack::ManagedTensor managed{};
  std::vector<int64_t> shape;
  PyObject* owner = nullptr;
};

void delete_export(dlpack::ManagedTensor* t) {
  auto* e = static_cast<Export*>(t->manager_ctx);
  // Consumers may call this from any thread, with or without the GIL.
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_XDECREF(e->owner);
  PyGILState_Release(gil);
  delete e;
}

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so the tensor is still ours to delete.
  if (PyCapsule_IsValid(capsule, dlpack::kCapsuleName)) {
    auto* t = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::kCapsuleName));
    t->deleter(t);
  } else {
    PyErr_Clear();
  }
}

nb::object export_view(nb::handle self, uint64_t offset, nb::tuple shape, int code, int bits) {
  DeviceBuffer& b = nb::cast<DeviceBuffer&>(self);
  if (bits <= 0 || bits % 8 != 0) throw nb::value_error("dtype bits must be a positive multiple of 8");
  auto e = std::make_unique<Export>();
  uint64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t n = nb::cast<int64_t>(shape[i]);
    if (n < 0) throw nb::value_error("negative dimension");
    e->shape.push_back(n);
    count *= static_cast<uint64_t>(n);
  }
  const uint64_t bytes = count * static_cast<uint64_t>(bits / 8);
  if (offset > b.nbytes() || bytes > b.nbytes() - offset)
    throw nb::value_error(("a view of " + std::to_string(bytes) + " bytes at offset " +
                           std::to_string(offset) + " does not fit the " +
                           std::to_string(b.nbytes()) + "-byte buffer").c_str());
  dlpack::Tensor& t = e->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(b.ptr());
  t.byte_offset = offset;
  t.device = {dlpack::kCUDA, b.device()};
  t.ndim = static_cast<int32_t>(e->shape.size());
  t.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  t.shape = e->shape.data();
  t.strides = nullptr;
  e->managed.deleter = delete_export;
  e->owner = self.ptr();
  Py_INCREF(e->owner);
  e->managed.manager_ctx = e.get();
  PyObject* capsule = PyCapsule_New(&e->managed, dlpack::kCapsuleName, capsule_destructor);
  if (capsule == nullptr) {
    Py_DECREF(e->owner);
    throw nb::python_error();
  }
  e.release();
  return nb::steal(capsule);
}

}  // namespace

bool device_buffer_memory(nb::handle obj, uint64_t* addr, uint64_t* nbytes) {
  if (Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject*>(nb::type<DeviceBuffer>().ptr()) ||
      !nb::inst_ready(obj))  // not constructed: the general path refuses it, as before
    return false;
  const DeviceBuffer& b = nb::cast<const DeviceBuffer&>(obj);
  *addr = b.ptr();
  *nbytes = b.nbytes();
  return true;
}

void register_device_buffer(nb::module_ m) {
  nb::class_<DeviceBuffer>(m, "DeviceBuffer",
                           "GPU memory allocated by gpufile (cuMemAlloc, the device's primary context).")
      .def(nb::init<uint64_t, int>(), "nbytes"_a, "device"_a = 0)
      .def_prop_ro("ptr", &DeviceBuffer::ptr)
      .def_prop_ro("nbytes", &DeviceBuffer::nbytes)
      .def_prop_ro("device", &DeviceBuffer::device)
      .def("__len__", &DeviceBuffer::nbytes)
      .def("copy_to_host",
           [](DeviceBuffer& b, nb::handle host, uint64_t offset) { b.copy(host, offset, true); },
           "host"_a, "offset"_a = 0,
           "Copies len(host) bytes from this buffer at `offset` into the writable host buffer.")
      .def("copy_from_host",
           [](DeviceBuffer& b, nb::handle host, uint64_t offset) { b.copy(host, offset, false); },
           "host"_a, "offset"_a = 0, "Copies all of the host buffer into this buffer at `offset`.")
      .def_prop_ro("__cuda_array_interface__", &DeviceBuffer::cuda_array_interface)
      .def("__dlpack_device__", [](DeviceBuffer& b) { return nb::make_tuple(int(dlpack::kCUDA), b.device()); })
      .def("__dlpack__",
           [](nb::handle self, nb::kwargs) {
             DeviceBuffer& b = nb::cast<DeviceBuffer&>(self);
             return export_view(self, 0, nb::make_tuple(b.nbytes()), 1, 8);
           },
           "A 1-D uint8 DLPack capsule of the whole buffer.")
      .def("_dlpack_view", &export_view, "offset"_a, "shape"_a, "code"_a, "bits"_a,
           "A DLPack capsule of `shape` items of DLPack type (code, bits) starting at `offset`.");
}

}  // namespace gpufile::py
