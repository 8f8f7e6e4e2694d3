/*
 * Minimal stand-in for the CUDA runtime API (<cuda_runtime.h>), for building tests and
 * examples on machines without the CUDA toolkit. Every function is a static inline wrapper
 * over the driver API of <cuda.h>, so a program using it links libcuda (in CI, the test double
 * built as tests/support/fakecuda/libcuda.so.1) and nothing else.
 *
 * Like the real runtime, it makes a context current implicitly: a thread's first call binds
 * the primary context of device 0 (or of the device chosen with cudaSetDevice), which the
 * runtime retains once per device and keeps for the life of the process.
 *
 * Works from C and C++. Only the subset gpufile's tests and examples use is here.
 */
#ifndef __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_H__

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#define CUDART_VERSION 13000

#ifdef __cplusplus
#define FAKECUDART_DEFAULT(value) = value
extern "C" {
#else
#define FAKECUDART_DEFAULT(value)
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorDeviceUninitialized = 201,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorContextIsDestroyed = 709,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorNotPermitted = 800,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

/* State shared by every translation unit of the program (weak definitions merge). */
__attribute__((weak)) unsigned char fakecudart_primary_held[64];
__attribute__((weak)) __thread int fakecudart_last_error;

static inline cudaError_t fakecudart_error(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_STUB_LIBRARY: return cudaErrorStubLibrary;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
  }
}

/* Records a failure for cudaGetLastError and passes the result on. cudaErrorNotReady is a
 * status, not an error, as in the real runtime. */
static inline cudaError_t fakecudart_result(CUresult r) {
  cudaError_t e = fakecudart_error(r);
  if (e != cudaSuccess && e != cudaErrorNotReady) fakecudart_last_error = (int)e;
  return e;
}

/* Makes the primary context of `device` current on this thread. */
static inline cudaError_t fakecudart_bind(int device) {
  CUcontext ctx = NULL;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, device);
  if (r != CUDA_SUCCESS) return fakecudart_result(r);
  /* Keep exactly one reference per device for the runtime. */
  if (device >= 0 && device < 64 &&
      __atomic_exchange_n(&fakecudart_primary_held[device], 1, __ATOMIC_SEQ_CST))
    cuDevicePrimaryCtxRelease(device);
  return fakecudart_result(cuCtxSetCurrent(ctx));
}

/* The implicit context: keeps the thread's current context, or binds device 0's. */
static inline cudaError_t fakecudart_context(void) {
  CUcontext ctx = NULL;
  if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != NULL) return cudaSuccess;
  return fakecudart_bind(0);
}

#define FAKECUDART_NEED_CONTEXT()               \
  do {                                          \
    cudaError_t ctx_e_ = fakecudart_context();  \
    if (ctx_e_ != cudaSuccess) return ctx_e_;   \
  } while (0)

static inline const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorStubLibrary: return "cudaErrorStubLibrary";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorDeviceUninitialized: return "cudaErrorDeviceUninitialized";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorContextIsDestroyed: return "cudaErrorContextIsDestroyed";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

static inline const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "the runtime is not initialised";
    case cudaErrorCudartUnloading: return "the runtime is unloading";
    case cudaErrorStubLibrary: return "the driver library is only a stub";
    case cudaErrorInsufficientDriver: return "the driver is too old";
    case cudaErrorNoDevice: return "no device found";
    case cudaErrorInvalidDevice: return "no device with that number";
    case cudaErrorDeviceUninitialized: return "the device context is not valid";
    case cudaErrorInvalidResourceHandle: return "the handle is not valid";
    case cudaErrorNotReady: return "work still pending";
    case cudaErrorIllegalAddress: return "the device touched memory it may not";
    case cudaErrorContextIsDestroyed: return "the context was destroyed";
    case cudaErrorHostMemoryAlreadyRegistered: return "memory range is already registered";
    case cudaErrorHostMemoryNotRegistered: return "memory range is not registered";
    case cudaErrorNotPermitted: return "not permitted here";
    case cudaErrorNotSupported: return "not supported";
    default: return "unknown error";
  }
}

static inline cudaError_t cudaGetLastError(void) {
  cudaError_t e = (cudaError_t)fakecudart_last_error;
  fakecudart_last_error = 0;
  return e;
}

static inline cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)fakecudart_last_error; }

static inline cudaError_t cudaDriverGetVersion(int *version) {
  return fakecudart_result(cuDriverGetVersion(version));
}

static inline cudaError_t cudaRuntimeGetVersion(int *version) {
  if (!version) return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

static inline cudaError_t cudaGetDeviceCount(int *count) {
  CUresult r;
  if (!count) return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  *count = 0;
  r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGetCount(count);
  return fakecudart_result(r);
}

static inline cudaError_t cudaSetDevice(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return e;
  if (device < 0 || device >= count) return fakecudart_result(CUDA_ERROR_INVALID_DEVICE);
  return fakecudart_bind(device);
}

static inline cudaError_t cudaGetDevice(int *device) {
  CUdevice dev = 0;
  CUresult r;
  if (!device) return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  FAKECUDART_NEED_CONTEXT();
  r = cuCtxGetDevice(&dev);
  if (r == CUDA_SUCCESS) *device = dev;
  return fakecudart_result(r);
}

static inline cudaError_t cudaDeviceSynchronize(void) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuCtxSynchronize());
}

static inline cudaError_t cudaMalloc(void **ptr, size_t size) {
  CUdeviceptr d = 0;
  CUresult r;
  if (!ptr) return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  FAKECUDART_NEED_CONTEXT();
  if (size == 0) {
    *ptr = NULL;
    return cudaSuccess;
  }
  r = cuMemAlloc(&d, size);
  if (r == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
  return fakecudart_result(r);
}

static inline cudaError_t cudaMallocManaged(void **ptr, size_t size,
                                            unsigned int flags FAKECUDART_DEFAULT(cudaMemAttachGlobal)) {
  CUdeviceptr d = 0;
  CUresult r;
  if (!ptr) return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  FAKECUDART_NEED_CONTEXT();
  if (size == 0) {
    *ptr = NULL;
    return cudaSuccess;
  }
  r = cuMemAllocManaged(&d, size, flags);
  if (r == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
  return fakecudart_result(r);
}

/* cudaFree(NULL) only makes sure a context exists (the classic way to initialise). */
static inline cudaError_t cudaFree(void *ptr) {
  FAKECUDART_NEED_CONTEXT();
  if (!ptr) return cudaSuccess;
  return fakecudart_result(cuMemFree((CUdeviceptr)(uintptr_t)ptr));
}

static inline cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuMemHostAlloc(ptr, size, flags));
}

static inline cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

static inline cudaError_t cudaFreeHost(void *ptr) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuMemFreeHost(ptr));
}

static inline cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuMemHostRegister(ptr, size, flags));
}

static inline cudaError_t cudaHostUnregister(void *ptr) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuMemHostUnregister(ptr));
}

/* With unified addressing the driver works out the direction itself; the kind is checked for
 * range only. */
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                     enum cudaMemcpyKind kind) {
  if ((int)kind < (int)cudaMemcpyHostToHost || (int)kind > (int)cudaMemcpyDefault)
    return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, count));
}

static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                          enum cudaMemcpyKind kind,
                                          cudaStream_t stream FAKECUDART_DEFAULT(0)) {
  if ((int)kind < (int)cudaMemcpyHostToHost || (int)kind > (int)cudaMemcpyDefault)
    return fakecudart_result(CUDA_ERROR_INVALID_VALUE);
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(
      cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, count, stream));
}

static inline cudaError_t cudaMemset(void *ptr, int value, size_t count) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuMemsetD8((CUdeviceptr)(uintptr_t)ptr, (unsigned char)value, count));
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuStreamCreate(stream, flags));
}

static inline cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

static inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return fakecudart_result(cuStreamDestroy(stream));
}

static inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuStreamSynchronize(stream));
}

static inline cudaError_t cudaStreamQuery(cudaStream_t stream) {
  FAKECUDART_NEED_CONTEXT();
  return fakecudart_result(cuStreamQuery(stream));
}

#undef FAKECUDART_NEED_CONTEXT

#ifdef __cplusplus
} /* extern "C" */

/* Typed conveniences, as the real runtime offers to C++. */
template <class T>
static inline cudaError_t cudaMalloc(T **ptr, size_t size) {
  return cudaMalloc((void **)ptr, size);
}
template <class T>
static inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
  return cudaMallocHost((void **)ptr, size);
}
template <class T>
static inline cudaError_t cudaHostAlloc(T **ptr, size_t size, unsigned int flags) {
  return cudaHostAlloc((void **)ptr, size, flags);
}
template <class T>
static inline cudaError_t cudaMallocManaged(T **ptr, size_t size,
                                            unsigned int flags = cudaMemAttachGlobal) {
  return cudaMallocManaged((void **)ptr, size, flags);
}
#endif

#undef FAKECUDART_DEFAULT

#endif /* __CUDA_RUNTIME_H__ */
