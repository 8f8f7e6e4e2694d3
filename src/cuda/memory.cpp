#include "cuda/memory.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace gpufile::cuda {

Error classify(const void* ptr, MemInfo* out) {
  *out = MemInfo{};
  const Driver* d = driver();
  if (d == nullptr) return Error::none();
  unsigned memory_type = 0;
  int is_managed = 0;
  int ordinal = -1;
  CUcontext ctx = nullptr;
  CUdeviceptr start = 0;
  size_t size = 0;
  int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_CONTEXT,
                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&memory_type, &is_managed, &ordinal, &ctx, &start, &size};
  CUresult r = d->PointerGetAttributes(6, attrs, data, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) return Error::cu(r);
  switch (memory_type) {
    case 0: return Error::none();  // unknown to CUDA: pageable host memory
    case CU_MEMORYTYPE_HOST: out->kind = MemKind::host_pinned; break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      out->kind = is_managed ? MemKind::managed : MemKind::device;
      break;
    default: return Error::of(Errc::memory_type_invalid);
  }
  out->context = ctx;
  out->device = ordinal;
  out->range_start = start;
  out->range_size = size;
  return Error::none();
}

Error alloc_pinned(size_t bytes, void** out) {
  if (const Driver* d = driver()) {
    CUresult r = d->MemHostAlloc(out, bytes, kMemHostAllocPortable);
    return r == CUDA_SUCCESS ? Error::none() : Error::cu(r);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Error::of(Errc::no_memory);
  // Staging memory must not be shared with a forked child's copy-on-write.
  madvise(p, bytes, MADV_DONTFORK);
  *out = p;
  return Error::none();
}

void free_pinned(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (const Driver* d = driver()) {
    d->MemFreeHost(p);
    return;
  }
  munmap(p, bytes);
}

ScopedContext::ScopedContext(CUcontext ctx) {
  const Driver* d = driver();
  if (ctx == nullptr || d == nullptr) return;
  d->CtxGetCurrent(&previous_);
  if (previous_ != ctx && d->CtxSetCurrent(ctx) == CUDA_SUCCESS) switched_ = true;
}

ScopedContext::~ScopedContext() {
  if (switched_) driver()->CtxSetCurrent(previous_);
}

}  // namespace gpufile::cuda
