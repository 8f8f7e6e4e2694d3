#include "sim_buffer.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "cuda/driver.hpp"
#include "sim_support.hpp"

namespace sim {
namespace cu = gpufile::cuda;

namespace {

void* driver_symbol(const char* name) {
  const char* path = std::getenv("GPUFILE_CUDA_LIBRARY");
  void* lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
}

// Device-side kinds need the driver to reach their bytes; the others are plain host memory.
bool through_driver(MemKind k) { return k == MemKind::device; }

}  // namespace

const char* mem_name(MemKind k) {
  switch (k) {
    case MemKind::device: return "device";
    case MemKind::managed: return "managed";
    case MemKind::pinned: return "pinned";
    case MemKind::pageable: return "pageable";
  }
  return "?";
}

SimBuffer::SimBuffer(MemKind kind, size_t size, size_t misalign, uint64_t fill_seed,
                     std::string* why)
    : kind_(kind), size_(size), misalign_(misalign) {
  total_ = kGuard + misalign + size + kGuard;
  const cu::Driver* d = cu::driver();
  if (d == nullptr && kind != MemKind::pageable) {
    *why = std::string("cannot allocate ") + mem_name(kind) +
           " memory: no CUDA driver loaded (GPUFILE_CUDA_LIBRARY names the test double)";
    return;
  }
  cu::CUresult r = cu::CUDA_SUCCESS;
  switch (kind) {
    case MemKind::device: {
      cu::CUdeviceptr p = 0;
      r = d->MemAlloc(&p, total_);
      addr_ = p;
      break;
    }
    case MemKind::managed: {
      using Fn = cu::CUresult (*)(cu::CUdeviceptr*, size_t, unsigned);
      auto fn = reinterpret_cast<Fn>(driver_symbol("cuMemAllocManaged"));
      cu::CUdeviceptr p = 0;
      r = fn ? fn(&p, total_, 1 /* CU_MEM_ATTACH_GLOBAL */) : cu::CUDA_ERROR_NOT_SUPPORTED;
      addr_ = p;
      break;
    }
    case MemKind::pinned: {
      void* p = nullptr;
      r = d->MemHostAlloc(&p, total_, 0);
      addr_ = reinterpret_cast<uint64_t>(p);
      break;
    }
    case MemKind::pageable:
      addr_ = reinterpret_cast<uint64_t>(std::aligned_alloc(4096, (total_ + 4095) & ~size_t{4095}));
      break;
  }
  if (r != cu::CUDA_SUCCESS || addr_ == 0) {
    *why = std::string("cannot allocate ") + mem_name(kind) + " memory: CUresult " +
           std::to_string(r);
    addr_ = 0;
    return;
  }
  mirror_.resize(total_);
  Rng(fill_seed).fill(mirror_.data(), total_);
  copy_in(0, mirror_.data(), total_);
}

SimBuffer::~SimBuffer() {
  if (addr_ == 0) return;
  const cu::Driver* d = cu::driver();
  switch (kind_) {
    case MemKind::device:
    case MemKind::managed: d->MemFree(addr_); break;
    case MemKind::pinned: d->MemFreeHost(reinterpret_cast<void*>(addr_)); break;
    case MemKind::pageable: std::free(reinterpret_cast<void*>(addr_)); break;
  }
}

void SimBuffer::copy_out(size_t at, void* dst, size_t n) const {
  if (n == 0) return;
  if (through_driver(kind_)) {
    cu::driver()->MemcpyDtoH(dst, addr_ + at, n);
  } else {
    std::memcpy(dst, reinterpret_cast<const void*>(addr_ + at), n);
  }
}

void SimBuffer::copy_in(size_t at, const void* src, size_t n) {
  if (n == 0) return;
  if (through_driver(kind_)) {
    cu::driver()->MemcpyHtoD(addr_ + at, src, n);
  } else {
    std::memcpy(reinterpret_cast<void*>(addr_ + at), src, n);
  }
}

void SimBuffer::put(size_t off, const void* src, size_t n) {
  if (n == 0) return;  // src may be null then
  const size_t at = kGuard + misalign_ + off;
  std::memcpy(mirror_.data() + at, src, n);
  copy_in(at, src, n);
}

std::vector<uint8_t> SimBuffer::get(size_t off, size_t n) const {
  std::vector<uint8_t> out(n);
  copy_out(kGuard + misalign_ + off, out.data(), n);
  return out;
}

void SimBuffer::accept(size_t off, const std::vector<uint8_t>& now) {
  if (now.empty()) return;
  std::memcpy(mirror_.data() + kGuard + misalign_ + off, now.data(), now.size());
}

std::string SimBuffer::check(int64_t from, size_t n) const {
  int64_t lo = static_cast<int64_t>(kGuard + misalign_) + from;
  int64_t hi = lo + static_cast<int64_t>(n);
  if (lo < 0) lo = 0;
  if (hi > static_cast<int64_t>(total_)) hi = static_cast<int64_t>(total_);
  if (hi <= lo) return "";
  std::vector<uint8_t> now(static_cast<size_t>(hi - lo));
  copy_out(static_cast<size_t>(lo), now.data(), now.size());
  if (std::memcmp(now.data(), mirror_.data() + lo, now.size()) == 0) return "";
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] == mirror_[static_cast<size_t>(lo) + i]) continue;
    const int64_t usable = lo + static_cast<int64_t>(i) - static_cast<int64_t>(kGuard + misalign_);
    return std::string(mem_name(kind_)) + " buffer byte " + std::to_string(usable) +
           " (relative to its base; negative or >= " + std::to_string(size_) +
           ": a guard byte) is " + std::to_string(now[i]) + ", the caller last left " +
           std::to_string(mirror_[static_cast<size_t>(lo) + i]);
  }
  return "";
}

}  // namespace sim
