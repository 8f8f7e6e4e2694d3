#include "cuda/memory.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/laps.hpp"
#include "core/log.hpp"
#include "sys/os.hpp"

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

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = 2 << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// live_pinned_bytes(): one relaxed add per slab allocation and free, nothing on the data path.
std::atomic<uint64_t> g_live_pinned{0};

}  // namespace

uint64_t live_pinned_bytes() { return g_live_pinned.load(std::memory_order_relaxed); }

namespace {

// An anonymous region aligned to a huge page, with its NUMA preference set but no page touched.
char* map_aligned(size_t len, int node) {
  // Map a huge page more than needed, then trim, so the region starts on a huge-page boundary.
  void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t a = round_up(r, kHugePage);
  if (a > r) munmap(raw, a - r);
  if (const size_t tail = r + len + kHugePage - (a + len)) munmap(reinterpret_cast<void*>(a + len), tail);
  char* p = reinterpret_cast<char*>(a);
  madvise(p, len, MADV_HUGEPAGE);  // a hint: without THP the pages are simply 4 KiB
  // Staging memory must not be shared with a forked child's copy-on-write.
  madvise(p, len, MADV_DONTFORK);
  // The node is chosen by mbind before the first touch rather than by touching from a thread
  // pinned there: this runs on the opening thread, whose affinity is the application's.
  // MPOL_PREFERRED, not BIND: a full node gives pages of another instead of failing the open.
  if (node >= 0) sys::os().prefer_node(p, len, node);
  return p;
}

void fault_in(char* p, size_t len) {
  for (size_t off = 0; off < len; off += kPage) p[off] = 0;
}

struct Slice {
  char* p;
  size_t len;
};

void* fault_in_slice(void* arg) {
  const Slice* s = static_cast<const Slice*>(arg);
  fault_in(s->p, s->len);
  return nullptr;
}

// Faults the slices in on a thread each (this thread takes any no thread could be made for).
// The threads get small stacks of their own size: glibc's cache then never hands one of them to
// a worker later, nor a worker's to them (it reuses a stack only up to 4x the size asked), so
// the short-lived threads of an open leave no trace in the stacks of the threads that stay.
void fault_in_parallel(std::vector<Slice>& slices) {
  constexpr size_t kStack = 256 << 10;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStack);
  std::vector<pthread_t> threads(slices.size());
  std::vector<bool> started(slices.size(), false);
  for (size_t i = 0; i < slices.size(); ++i)
    started[i] = pthread_create(&threads[i], &attr, fault_in_slice, &slices[i]) == 0;
  pthread_attr_destroy(&attr);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (started[i]) pthread_join(threads[i], nullptr);
    else fault_in(slices[i].p, slices[i].len);
  }
}

// Registers a faulted-in region with the driver (if any) and counts it; unmaps it on failure.
Error register_region(char* p, size_t len, int node, int* landed) {
  if (landed != nullptr) {
    const int n = node >= 0 ? sys::os().node_of_page(p) : -1;
    *landed = n >= 0 ? n : -1;
  }
  if (const Driver* d = driver()) {
    CUresult res = d->MemHostRegister(p, len, kMemHostRegisterPortable);
    if (res != CUDA_SUCCESS) {
      munmap(p, len);
      return Error::cu(res);
    }
  }
  g_live_pinned.fetch_add(len, std::memory_order_relaxed);
  return Error::none();
}

}  // namespace

// Anonymous pages, faulted in here (as transparent huge pages where the kernel allows them), then
// registered with the driver. Faulting the pages in is what pinning costs in a VM, and huge pages
// make it about 3x cheaper: for 128 MiB on the H100 machine (bench/probe_pinning.py)
// cuMemHostAlloc took 42-52 ms, this 21-23 ms (with 4 KiB pages: 63-70 ms).
Error alloc_pinned(size_t bytes, void** out, int node, int* landed) {
  const size_t len = round_up(bytes, kPage);
  char* p = map_aligned(len, node);
  if (p == nullptr) return Error::of(Errc::no_memory);
  fault_in(p, len);
  if (Error e = register_region(p, len, node, landed)) return e;
  *out = p;
  return Error::none();
}

namespace {

// Undoes a failed alloc_pinned_many: what it registered goes, and no region keeps a pointer.
void free_blocks(std::vector<PinnedRequest>& regions, std::vector<PinnedBlock>* blocks) {
  for (const PinnedBlock& b : *blocks) free_pinned(b.base, b.bytes);
  blocks->clear();
  for (PinnedRequest& r : regions) r.out = nullptr;
}

}  // namespace

// As alloc_pinned, for several regions at once: the regions wanting one node are slices of one
// mapping, faulted in on a thread per slice and registered with the driver in one call. On the
// H200 machine (a probe; docs/performance.md, "Where the defaults come from"), for 16 x 8 MiB
// of huge pages: faulting in took 21.6-24.6 ms on one thread against 11-12 ms on 16, and
// registering 4.7-7.2 ms as 16 calls against 3.3-3.5 ms as one. Registering each region on the
// thread that faulted it in, all at once, was slower still (H200, a session's 105 MiB: 9.6-9.7
// ms against 5.9-6.7 for faulting and one registration; docs/performance.md, "Warm first
// load"): the driver takes the calls one at a time.
Error alloc_pinned_many(std::vector<PinnedRequest>& regions, std::vector<PinnedBlock>* blocks,
                        PinnedCosts* costs) {
  std::vector<int> nodes;
  for (const PinnedRequest& r : regions)
    if (std::find(nodes.begin(), nodes.end(), r.node) == nodes.end()) nodes.push_back(r.node);
  for (int node : nodes) {
    size_t len = 0;
    for (const PinnedRequest& r : regions)
      if (r.node == node) len += round_up(r.bytes, kPage);
    char* base = map_aligned(len, node);
    if (base == nullptr) {
      free_blocks(regions, blocks);
      return Error::of(Errc::no_memory);
    }
    std::vector<Slice> slices;
    size_t at = 0;
    for (PinnedRequest& r : regions) {
      if (r.node != node) continue;
      r.out = base + at;
      slices.push_back({base + at, round_up(r.bytes, kPage)});
      at += round_up(r.bytes, kPage);
    }
    Laps laps;
    fault_in_parallel(slices);
    const double fault_ms = laps.lap();
    Error e = register_region(base, len, -1, nullptr);  // on failure it unmapped `base`
    if (costs != nullptr) {
      costs->fault_ms += fault_ms;
      costs->register_ms += laps.lap();
    }
    if (e) {
      free_blocks(regions, blocks);
      return e;
    }
    blocks->push_back({base, len});
    for (PinnedRequest& r : regions) {
      if (r.node != node) continue;
      const int landed = node >= 0 ? sys::os().node_of_page(r.out) : -1;
      r.landed = landed >= 0 ? landed : -1;
    }
  }
  return Error::none();
}

void free_pinned(void* p, size_t bytes) {
  if (p == nullptr) return;
  // The driver unregisters only with a context current (else CUDA_ERROR_INVALID_VALUE) and the
  // pages would stay pinned past the munmap below; every owner frees with one current (the
  // session's close borrows one). Said, so that a path that does not is found; not when the
  // driver has shut down (a process's exit), which lets go of everything itself.
  if (const Driver* d = driver(); d != nullptr)
    if (const CUresult r = d->MemHostUnregister(p); r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
      GPUFILE_LOG(LogLevel::warn, "unpinning %zu bytes of staging failed (CUresult %d): they stay pinned",
                  bytes, static_cast<int>(r));
  munmap(p, round_up(bytes, kPage));
  g_live_pinned.fetch_sub(round_up(bytes, kPage), std::memory_order_relaxed);
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

MemoryContext::MemoryContext(const void* ptr) {
  const Driver* d = driver();
  if (d == nullptr) return;
  MemInfo mem;
  // cuPointerGetAttributes needs no current context (tests/support/probe). A failed lookup
  // (CUDA array memory) counts as memory CUDA does not know.
  if (!classify(ptr, &mem) && mem.context != nullptr) {
    ctx_ = mem.context;
    return;
  }
  if (mem.device < 0 && d->CtxGetCurrent(&ctx_) == CUDA_SUCCESS && ctx_ != nullptr) return;
  retain_primary(mem.device < 0 ? device_to_borrow(*d) : mem.device);
}

void MemoryContext::retain_primary(int ordinal) {
  const Driver* d = driver();
  CUcontext primary = nullptr;
  if (d->DeviceGet(&device_, ordinal) != CUDA_SUCCESS ||
      d->DevicePrimaryCtxRetain(&primary, device_) != CUDA_SUCCESS)
    return;
  ctx_ = primary;
  retained_ = true;
}

MemoryContext::~MemoryContext() {
  if (retained_) driver()->DevicePrimaryCtxRelease(device_);
}

PrimaryHold PrimaryHold::current() {
  PrimaryHold h;
  const Driver* d = driver();
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (d == nullptr || d->DevicePrimaryCtxGetState == nullptr ||
      d->CtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr ||
      d->CtxGetDevice(&dev) != CUDA_SUCCESS)
    return h;
  // Retaining an inactive primary context would create one: a context in use while its
  // device's primary context is inactive is not that primary context.
  unsigned flags = 0;
  int active = 0;
  if (d->DevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active) return h;
  CUcontext primary = nullptr;
  if (d->DevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS) return h;
  if (primary != ctx) {
    d->DevicePrimaryCtxRelease(dev);
    return h;
  }
  h.device_ = dev;
  h.held_ = true;
  return h;
}

PrimaryHold::PrimaryHold(PrimaryHold&& other) noexcept
    : device_(other.device_), held_(std::exchange(other.held_, false)) {}

PrimaryHold& PrimaryHold::operator=(PrimaryHold&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    held_ = std::exchange(other.held_, false);
  }
  return *this;
}

void PrimaryHold::release() {
  if (held_) driver()->DevicePrimaryCtxRelease(device_);
  held_ = false;
}

CUresult ContextStream::make(CUcontext ctx, unsigned flags, ContextStream* out) {
  CUstream s = nullptr;
  if (CUresult r = driver()->StreamCreate(&s, flags); r != CUDA_SUCCESS) return r;
  out->destroy();
  out->ctx_ = ctx;
  out->stream_ = s;
  out->hold_ = PrimaryHold::current();
  return CUDA_SUCCESS;
}

ContextStream::ContextStream(ContextStream&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)),
      stream_(std::exchange(other.stream_, nullptr)),
      hold_(std::move(other.hold_)) {}

ContextStream& ContextStream::operator=(ContextStream&& other) noexcept {
  if (this != &other) {
    destroy();
    ctx_ = std::exchange(other.ctx_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    hold_ = std::move(other.hold_);
  }
  return *this;
}

void ContextStream::destroy() {
  if (const Driver* d = driver(); d != nullptr && stream_ != nullptr) d->StreamDestroy(stream_);
  stream_ = nullptr;
  ctx_ = nullptr;
  hold_ = PrimaryHold();  // the context may go now that its stream has
}

namespace {
std::atomic<int> preferred_device{-1};
}  // namespace

void prefer_device(int ordinal) { preferred_device.store(ordinal, std::memory_order_relaxed); }

int device_to_borrow(const Driver& d) {
  if (d.DevicePrimaryCtxGetState != nullptr) {
    for (int ordinal = 0; ordinal < d.device_count; ++ordinal) {
      CUdevice dev = 0;
      unsigned flags = 0;
      int active = 0;
      if (d.DeviceGet(&dev, ordinal) == CUDA_SUCCESS &&
          d.DevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
        return ordinal;
    }
  }
  const int preferred = preferred_device.load(std::memory_order_relaxed);
  return preferred >= 0 && preferred < d.device_count ? preferred : 0;
}

ScopedAnyContext::ScopedAnyContext() {
  const Driver* d = driver();
  CUcontext current = nullptr;
  if (d == nullptr || d->CtxGetCurrent(&current) != CUDA_SUCCESS || current != nullptr) return;
  CUcontext primary = nullptr;
  if (d->DeviceGet(&device_, device_to_borrow(*d)) != CUDA_SUCCESS ||
      d->DevicePrimaryCtxRetain(&primary, device_) != CUDA_SUCCESS)
    return;
  borrowed_ = true;
  d->CtxSetCurrent(primary);
}

ScopedAnyContext::~ScopedAnyContext() {
  if (!borrowed_) return;
  const Driver* d = driver();
  d->CtxSetCurrent(nullptr);
  d->DevicePrimaryCtxRelease(device_);
}

}  // namespace gpufile::cuda
