// The CUDA driver, loaded at run time. No CUDA toolkit is needed to build gpufile: the few
// types and constants used here are declared below with the driver's own values, and every
// entry point is looked up with dlsym() in libcuda.so.1 (or $GPUFILE_CUDA_LIBRARY).
//
// In CI a test double of libcuda.so.1 (tests/support/fakecuda) stands in for the driver, so
// this exact code runs there too. The double implements precisely the table below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// The driver's opaque handles, declared at global scope as <cuda.h> declares them: a
// `struct X*` first named inside the namespace below would declare gpufile::cuda::X instead, a
// different type in files that did not see <cufile.h> or <gpufile/file.hpp> first (which
// declare CUstream_st globally), and the same function would be two to the linker.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;

namespace gpufile::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = ::CUctx_st*;
using CUstream = ::CUstream_st*;
using CUevent = ::CUevent_st*;
using CUhostFn = void (*)(void* user_data);

// CUresult values the library looks at.
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

// CUpointer_attribute
inline constexpr int CU_POINTER_ATTRIBUTE_CONTEXT = 1;
inline constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
inline constexpr int CU_POINTER_ATTRIBUTE_IS_MANAGED = 8;
inline constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
inline constexpr int CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;
inline constexpr int CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;

// CUmemorytype
inline constexpr unsigned CU_MEMORYTYPE_HOST = 1;
inline constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
inline constexpr unsigned CU_MEMORYTYPE_ARRAY = 3;
inline constexpr unsigned CU_MEMORYTYPE_UNIFIED = 4;

// cuda.h makes these two macros, so they get names of our own here.
inline constexpr unsigned kMemHostRegisterPortable = 0x01;  // CU_MEMHOSTREGISTER_PORTABLE
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr int CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33;
inline constexpr int CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34;
inline constexpr int CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50;

struct CUuuid { char bytes[16]; };

// cuMemcpyBatchAsync's per-copy attributes (CUDA 12.8+): 24 bytes, as in cuda.h.
struct CUmemLocation {
  int type = 0;  // CUmemLocationType; 0 (invalid) means no hint
  int id = 0;
};
struct CUmemcpyAttributes {
  int srcAccessOrder = 0;  // CUmemcpySrcAccessOrder
  CUmemLocation srcLocHint;
  CUmemLocation dstLocHint;
  unsigned flags = 0;
};
static_assert(sizeof(CUmemcpyAttributes) == 24, "cuda.h's CUmemcpyAttributes_v1");
inline constexpr int CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1;  // the source is read in stream order

// cuMemcpy2DAsync's description of a pitched copy: Height rows of WidthInBytes, each side's
// rows Pitch bytes apart, starting (XInBytes, Y) into its memory. 128 bytes, as cuda.h's
// CUDA_MEMCPY2D_v2. Pitches may not pass the device's CU_DEVICE_ATTRIBUTE_MAX_PITCH.
using CUarray = struct CUarray_st*;
struct CUDA_MEMCPY2D {
  size_t srcXInBytes = 0;
  size_t srcY = 0;
  unsigned srcMemoryType = 0;  // CUmemorytype
  const void* srcHost = nullptr;
  CUdeviceptr srcDevice = 0;
  CUarray srcArray = nullptr;
  size_t srcPitch = 0;
  size_t dstXInBytes = 0;
  size_t dstY = 0;
  unsigned dstMemoryType = 0;
  void* dstHost = nullptr;
  CUdeviceptr dstDevice = 0;
  CUarray dstArray = nullptr;
  size_t dstPitch = 0;
  size_t WidthInBytes = 0;
  size_t Height = 0;
};
static_assert(sizeof(CUDA_MEMCPY2D) == 128, "cuda.h's CUDA_MEMCPY2D_v2");
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11;

// X(name-in-this-table, symbol-in-libcuda, return, parameters)
#define GPUFILE_CUDA_DRIVER_FUNCTIONS(X)                                                         \
  X(Init, "cuInit", CUresult, (unsigned flags))                                                   \
  X(DriverGetVersion, "cuDriverGetVersion", CUresult, (int* version))                             \
  X(GetErrorName, "cuGetErrorName", CUresult, (CUresult, const char**))                           \
  X(GetErrorString, "cuGetErrorString", CUresult, (CUresult, const char**))                       \
  X(DeviceGetCount, "cuDeviceGetCount", CUresult, (int* count))                                   \
  X(DeviceGet, "cuDeviceGet", CUresult, (CUdevice*, int ordinal))                                 \
  X(DeviceGetName, "cuDeviceGetName", CUresult, (char*, int len, CUdevice))                       \
  X(DeviceGetUuid, "cuDeviceGetUuid_v2", CUresult, (CUuuid*, CUdevice))                           \
  X(DeviceGetAttribute, "cuDeviceGetAttribute", CUresult, (int* value, int attrib, CUdevice))     \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext*, CUdevice))         \
  X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice))                \
  X(CtxGetCurrent, "cuCtxGetCurrent", CUresult, (CUcontext*))                                     \
  X(CtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                                      \
  X(CtxGetDevice, "cuCtxGetDevice", CUresult, (CUdevice*))                                        \
  X(PointerGetAttributes, "cuPointerGetAttributes", CUresult,                                    \
    (unsigned num, int* attributes, void** data, CUdeviceptr ptr))                                \
  X(MemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr*, size_t))                                  \
  X(MemFree, "cuMemFree_v2", CUresult, (CUdeviceptr))                                             \
  X(MemHostAlloc, "cuMemHostAlloc", CUresult, (void**, size_t, unsigned flags))                   \
  X(MemFreeHost, "cuMemFreeHost", CUresult, (void*))                                              \
  X(MemHostRegister, "cuMemHostRegister_v2", CUresult, (void*, size_t, unsigned flags))           \
  X(MemHostUnregister, "cuMemHostUnregister", CUresult, (void*))                                  \
  X(MemcpyHtoD, "cuMemcpyHtoD_v2", CUresult, (CUdeviceptr, const void*, size_t))                  \
  X(MemcpyDtoH, "cuMemcpyDtoH_v2", CUresult, (void*, CUdeviceptr, size_t))                        \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                                           \
    (CUdeviceptr, const void*, size_t, CUstream))                                                 \
  X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult, (void*, CUdeviceptr, size_t, CUstream))    \
  X(Memcpy2DAsync, "cuMemcpy2DAsync_v2", CUresult, (const CUDA_MEMCPY2D*, CUstream))              \
  X(StreamCreate, "cuStreamCreate", CUresult, (CUstream*, unsigned flags))                        \
  X(StreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream))                                    \
  X(StreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))                               \
  X(StreamQuery, "cuStreamQuery", CUresult, (CUstream))                                           \
  X(StreamWaitEvent, "cuStreamWaitEvent", CUresult, (CUstream, CUevent, unsigned flags))          \
  X(EventCreate, "cuEventCreate", CUresult, (CUevent*, unsigned flags))                           \
  X(EventDestroy, "cuEventDestroy_v2", CUresult, (CUevent))                                       \
  X(EventRecord, "cuEventRecord", CUresult, (CUevent, CUstream))                                  \
  X(EventQuery, "cuEventQuery", CUresult, (CUevent))                                              \
  X(EventSynchronize, "cuEventSynchronize", CUresult, (CUevent))                                  \
  X(LaunchHostFunc, "cuLaunchHostFunc", CUresult, (CUstream, CUhostFn, void* user_data))

// Entry points newer drivers have and gpufile uses when they are there (null otherwise).
#define GPUFILE_CUDA_OPTIONAL_FUNCTIONS(X)                                                       \
  X(DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", CUresult,                           \
    (CUdevice, unsigned* flags, int* active))                                                     \
  /* CUDA 13's cuMemcpyBatchAsync (12.8's had a failIdx argument more) */                        \
  X(MemcpyBatchAsync, "cuMemcpyBatchAsync_v2", CUresult,                                        \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                      \
     CUmemcpyAttributes * attrs, size_t * attr_idxs, size_t num_attrs, CUstream))

// The loaded driver. All pointers but the optional ones are non-null once load() succeeded.
struct Driver {
#define GPUFILE_CUDA_DECLARE_MEMBER(name, sym, ret, params) ret(*name) params = nullptr;
  GPUFILE_CUDA_DRIVER_FUNCTIONS(GPUFILE_CUDA_DECLARE_MEMBER)
  GPUFILE_CUDA_OPTIONAL_FUNCTIONS(GPUFILE_CUDA_DECLARE_MEMBER)
#undef GPUFILE_CUDA_DECLARE_MEMBER
  int driver_version = 0;
  int device_count = 0;
};

// Loads and initialises the driver once per process. Returns nullptr when there is no usable
// driver (no libcuda, a stub library, no device); why() then says why, in one sentence.
const Driver* driver();
const std::string& why_no_driver();
// In the child of a fork (pthread_atfork handler): if the parent had initialised CUDA, driver()
// answers null from now on (see driver.cpp).
void forget_driver_after_fork();

// The PCI address of GPU `ordinal` as sysfs and NVML name it ("dddd:bb:dd.0", lower-case hex),
// from the driver's PCI attributes (what cuDeviceGetPCIBusId formats, in upper case).
std::string pci_bus_id(const Driver& d, int ordinal);

// "CUDA_ERROR_X: text" for logs and error messages.
std::string describe(CUresult r);
std::string describe_with(const Driver& d, CUresult r);

}  // namespace gpufile::cuda
