// The DLPack exchange structs (DLPack 0.8 ABI, the unversioned "dltensor" capsule every
// framework speaks), declared here from the published ABI so no DLPack header is needed.
#pragma once

#include <cstdint>

namespace gpufile::py::dlpack {

// DLDeviceType values used here.
enum DeviceType : int32_t {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,
  kCUDAManaged = 13,
};

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;  // DLDataTypeCode: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool, 10 f8e4m3fn, 12 f8e5m2
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

}  // namespace gpufile::py::dlpack
