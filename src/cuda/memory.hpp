// What kind of memory a pointer is, and pinned host memory for staging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "cuda/driver.hpp"

namespace gpufile::cuda {

enum class MemKind : int {
  host_pageable,  // plain host memory (or anything CUDA does not know)
  host_pinned,    // cuMemHostAlloc / cuMemHostRegister memory
  device,         // cuMemAlloc memory: the CPU cannot touch it
  managed,        // cuMemAllocManaged memory: reached through CUDA copies like device memory
};

struct MemInfo {
  MemKind kind = MemKind::host_pageable;
  CUcontext context = nullptr;  // owning context of device/managed memory
  int device = -1;
  uint64_t range_start = 0;     // the CUDA allocation holding the pointer (0 if unknown)
  uint64_t range_size = 0;

  bool needs_staging() const { return kind == MemKind::device || kind == MemKind::managed; }
};

// Classifies `ptr` with the driver's pointer attributes. Without a driver everything is host
// memory. Errors: memory_type_invalid for CUDA array memory, cuda for a driver failure.
Error classify(const void* ptr, MemInfo* out);

// Host memory aligned to 2 MiB (huge pages where the kernel allows), registered with the CUDA
// driver when there is one (so async copies are real DMA), else plain memory. Freed by
// free_pinned() with the same size. `node` >= 0: its pages are asked of that NUMA node (where it
// has room) before they are first touched and pinned; *landed then says where the first page
// went (-1 when the kernel would not say).
Error alloc_pinned(size_t bytes, void** out, int node = -1, int* landed = nullptr);
void free_pinned(void* p, size_t bytes);
// One region of alloc_pinned_many(): what to allocate, and what came of it.
struct PinnedRequest {
  size_t bytes = 0;
  int node = -1;         // as alloc_pinned's `node`
  void* out = nullptr;   // the region: a slice of one of the blocks
  int landed = -1;       // as alloc_pinned's `*landed`
};
// A registered mapping of alloc_pinned_many(), freed by free_pinned(base, bytes) once no region of
// it is used any more.
struct PinnedBlock {
  void* base = nullptr;
  size_t bytes = 0;
};
// What alloc_pinned_many() spent its time on, for the open's log line.
struct PinnedCosts {
  double fault_ms = 0;     // faulting the pages in, on a thread per region
  double register_ms = 0;  // the driver's registration, on the calling thread
};
// Pinned memory for every region of `regions` (what a session's open spends most of its time
// on): the regions of one node are slices of one block, their pages faulted in on a thread
// each and registered in one call. All or nothing: on failure no block is left. `costs`, when
// given, is added to.
Error alloc_pinned_many(std::vector<PinnedRequest>& regions, std::vector<PinnedBlock>* blocks,
                        PinnedCosts* costs = nullptr);
// Bytes of pinned staging held now: what alloc_pinned() handed out and free_pinned() has not yet
// taken back (page-rounded). A leak check for soak runs and tests (tests/soak, Python's
// gpufile.stats()["pinned_staging_bytes"]); 0 once the driver is closed.
uint64_t live_pinned_bytes();

// Makes `ctx` current on this thread if it is not already; restores the previous context on
// destruction. A null ctx is a no-op.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// The context in which to use the memory at `ptr`: its owning context; else (memory mapped
// without one, cuMemMap) its device's primary context; else (host memory) the thread's current
// context; else the primary context of device_to_borrow's GPU (declared below). Primary contexts
// are retained for the object's life, so it may outlive a call (an event made in the context);
// an owning context is not: the caller keeps its memory, and so that context, valid for the call
// (what gpufile keeps there longer holds it: PrimaryHold). Null without a driver, or where that
// GPU has none.
// For calls on a caller's thread, which need not have a context current (Python starts threads
// without one): make it current with a ScopedContext.
class MemoryContext {
 public:
  explicit MemoryContext(const void* ptr);
  ~MemoryContext();
  MemoryContext(const MemoryContext&) = delete;
  MemoryContext& operator=(const MemoryContext&) = delete;

  CUcontext get() const { return ctx_; }

 private:
  void retain_primary(int ordinal);

  CUcontext ctx_ = nullptr;
  bool retained_ = false;
  CUdevice device_ = 0;
};

// Keeps the current context alive while held, where it is a device's primary context.
// gpufile's lasting resources in a context (a worker's stream and events, a caller's staging
// buffer's stream) go when the context goes, and an application may release its last reference
// to a primary context while a session lives (a test's teardown, a library's retain and release
// around its own calls): the next copy would then use freed driver objects, which crashes on a
// GPU. Whoever makes such a resource holds the context until the resource is destroyed. A
// context the application created itself (cuCtxCreate) is not held: the application destroys it
// when it chooses, and must not before the driver is closed (docs/compatibility.md).
class PrimaryHold {
 public:
  PrimaryHold() = default;
  // Holds the calling thread's current context if it is its device's primary context.
  static PrimaryHold current();
  ~PrimaryHold() { release(); }
  PrimaryHold(PrimaryHold&& other) noexcept;
  PrimaryHold& operator=(PrimaryHold&& other) noexcept;
  PrimaryHold(const PrimaryHold&) = delete;
  PrimaryHold& operator=(const PrimaryHold&) = delete;

 private:
  void release();

  CUdevice device_ = 0;
  bool held_ = false;
};

// A stream gpufile keeps in one context (a worker's copy stream, a caller staging buffer's),
// with that context held (PrimaryHold) until the stream is destroyed: destroying it destroys the
// stream first, then lets the context go. Move-only; empty (null) when never made.
class ContextStream {
 public:
  ContextStream() = default;
  // A stream with `flags` in `ctx`, which must be current on the calling thread.
  static CUresult make(CUcontext ctx, unsigned flags, ContextStream* out);
  ~ContextStream() { destroy(); }
  ContextStream(ContextStream&& other) noexcept;
  ContextStream& operator=(ContextStream&& other) noexcept;
  ContextStream(const ContextStream&) = delete;
  ContextStream& operator=(const ContextStream&) = delete;

  CUcontext context() const { return ctx_; }
  CUstream get() const { return stream_; }

 private:
  void destroy();

  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  PrimaryHold hold_;  // declared last: goes after the stream
};

// The GPU whose primary context a thread with none current borrows (to pin memory, to open the
// session): the first one the process made active already (its framework's: torch's on its
// rank's GPU), else the one prefer_device named where it names a GPU, else 0. Retaining another
// GPU's primary context creates it there: in a tensor-parallel rank on GPU 1, device 0's cost
// that process's first load 0.14-0.19 s (2 H200) and some hundreds of MiB of GPU 0's memory.
int device_to_borrow(const Driver& d);
// The GPU this process serves where it knows (the session sets its local rank: LOCAL_RANK & co),
// for device_to_borrow; -1: none known.
void prefer_device(int ordinal);

// Makes some context current for the scope when the thread has none: the primary context of
// device_to_borrow's GPU, retained for the scope. For releasing what gpufile allocated (pinned
// registrations are portable, so any context will do) on a thread that never used CUDA: the
// driver refuses cuMemHostUnregister there.
class ScopedAnyContext {
 public:
  ScopedAnyContext();
  ~ScopedAnyContext();
  ScopedAnyContext(const ScopedAnyContext&) = delete;
  ScopedAnyContext& operator=(const ScopedAnyContext&) = delete;

 private:
  bool borrowed_ = false;
  CUdevice device_ = 0;
};

}  // namespace gpufile::cuda
