// The runtime behind every API: the driver session (settings, executor, staging pools), the
// registered files and buffers, and the validation and routing of each IO.
//
// Nothing here knows cuFile's types: src/capi/ maps these calls and their Error codes onto the
// cuFile ABI, and the C++ API uses them directly.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/settings.hpp"
#include "exec/job.hpp"
#include "route/route.hpp"

namespace gpufile {

namespace remote {
class Object;
struct Options;
struct Failure;
}  // namespace remote

namespace exec {
struct FileRows;
}
struct Session;
struct FileHandle;
struct BufferRegistration;

// One validated IO. Holds the session, the file handle and the buffer registration it uses, so
// none of them can go away (deregister and close wait) until the Io is destroyed. An Io may be
// destroyed on any thread, an IO worker's included (batch completions do that).
class LegacyStreamFence;

class Io {
 public:
  ~Io();
  exec::Job job;
  // stats::call_started() when prepared: the start of this IO's latency (0 with stats off).
  uint64_t started() const { return started_; }

 private:
  friend class Runtime;
  // What the job's copies wait for on the legacy stream (Job::after), while the Io lives.
  std::shared_ptr<LegacyStreamFence> fence_;
  // Counted in Session::inflight, not owned: the session is destroyed by Runtime::close() on
  // the closing thread, never by the last Io (which may run on a worker that close must join).
  Session* session_ = nullptr;
  std::shared_ptr<FileHandle> file_;
  std::shared_ptr<BufferRegistration> buffer_;
  uint64_t started_ = 0;
  bool routed_ = false;  // its storage route is chosen (run_if_vendor): submit() keeps it
};

class Runtime {
 public:
  static Runtime& instance();

  // ---- driver session ----
  // Explicit open: opens the session if needed; counts one use.
  Error open();
  // The implicit open of the first handle/buffer register or IO: opens once, counting one use.
  Error ensure_open();
  // Counts one use off; the last one closes the session: waits for IO in flight, then drops
  // every registered handle and buffer and frees all staging memory.
  Error close();
  long use_count() const;
  bool is_open() const;
  // Settings of the open session (defaults when closed).
  Settings settings() const;
  // Runs fn on the open session's settings; false when closed.
  bool update_settings(const std::function<void(Settings&)>& fn);
  // The IO engine the workers use, and why it is not io_uring (empty if it is).
  std::string engine_name() const;
  std::string engine_note() const;
  // The NUMA placement of the open session: the decision in one sentence, then a line per placed
  // worker (its node, CPUs, where its staging landed). Empty when closed.
  std::vector<std::string> placement() const;

  // ---- files ----
  // Registers an open fd. The handle is an opaque non-null token.
  Error register_file(int fd, void** handle);
  // Forgets the handle once IO in flight on it has finished.
  Error deregister_file(void* handle);

  // What the planner knows of a registered file and would do with a read of all of it.
  struct FileReport {
    bool direct_capable = false;  // O_DIRECT works on this file
    sys::DioAlign align;
    uint64_t size = 0;
    sys::Residency resident;      // page cache residency of the whole file
    bool cachestat_ok = false;
    route::StorageChoice read;    // what a read of the whole file would do, and why
    // gpufile.cache_policy: whether reads that miss the page cache go through it, and why; the
    // memory the page cache can hold as weighed then (auto only, where known).
    route::CacheChoice cache;
    std::optional<uint64_t> cache_room;
    // Page-cache DMA (exec/cache_windows.hpp): whether such a read into GPU memory copies out of
    // registered windows of this file, and the session's budget for them (0: the path is off).
    bool copies_from_cache = false;
    uint64_t cache_dma_budget = 0;
    // Long reads make the windows of bytes read before from this many bytes on
    // (Session::long_read_windows_from); 0: they do not.
    uint64_t long_read_windows_from = 0;
    bool gpus_share_host = false;
    std::string sharing_why;  // why gpus_share_host is what it is (exec::HostSharing::why)
    // The largest piece a worker stages of cached bytes now (Executor::shared_piece; 0: a
    // slab), the slab, the processes known to share the host and its last-level cache.
    uint64_t shared_piece = 0;
    uint64_t slab = 0;
    unsigned staging_processes = 0;
    uint64_t last_level_cache = 0;
    // An O_DIRECT read's pieces into GPU memory (gpufile.cold_piece_kb, else a slab), and how
    // many the workers keep in flight.
    uint64_t direct_piece = 0;
    unsigned direct_in_flight = 0;
    // Path 5: whether a large aligned read into GPU memory goes through NVIDIA's library, and
    // why; the state of that library in the session; NVIDIA's refusal of this file, if any.
    route::VendorChoice vendor;
    std::string vendor_state;
    std::string vendor_refusal;
  };
  Error explain_file(void* handle, FileReport* out);

  // ---- buffers ----
  Error register_buffer(const void* base, size_t length);
  Error deregister_buffer(const void* base);

  // ---- IO ----
  // Validates an IO of `size` bytes between the file at `file_offset` and memory at
  // base + buffer_offset. The Io then runs with run() or submit(), which choose its route.
  // `base_mem`, when given, is what cuda::classify(base) said earlier: prepare then makes no
  // CUDA call at all (stream callbacks must not). `seen`, when given, keeps handles' fstat()
  // between calls: the entries of one batch submission are admitted together, so one check per
  // handle that its descriptor is still the registered file covers them all.
  struct SeenFiles {
    static constexpr unsigned kMax = 8;  // the handles remembered; more are checked each time
    const void* handle[kMax] = {};
    struct stat st[kMax] = {};
    unsigned count = 0;
    const struct stat* find(const void* h) const;
    void add(const void* h, const struct stat& s);
  };
  Error prepare(sys::IoKind kind, void* handle, const void* base, uint64_t size,
                int64_t file_offset, int64_t buffer_offset, std::unique_ptr<Io>* out,
                const cuda::MemInfo* base_mem = nullptr, SeenFiles* seen = nullptr);
  // Runs the Io to completion on this thread's behalf: on this thread, the workers, or both,
  // as route::plan_threads says for the load at this moment.
  IoResult run(Io& io);
  // Where path 5 (NVIDIA's library) takes the Io as it would take a synchronous call, runs it
  // to completion on this thread (through NVIDIA's library, or gpufile's own paths where that
  // fails) and returns its result; otherwise nothing, the Io untouched, for submit(). What
  // File::start() asks first: NVIDIA's library splits one large IO over threads of its own
  // (execution.parallel_io), so a Future it takes needs no worker.
  std::optional<IoResult> run_if_vendor(Io& io);
  // Runs an Io whose memory is host memory entirely on this thread, with plain kernel IO and no
  // CUDA call at all, whatever its size: what a CUDA host function (stream op) may do.
  IoResult run_on_this_thread(Io& io);
  // Runs a prepared read (of rows.first, rows.bytes() long) that gathers `rows` into its
  // memory, on this thread (exec/gather.hpp); counted as a read of the page cache.
  IoResult read_rows(Io& io, const exec::FileRows& rows);
  // Starts the Io; io.job.on_complete (set by the caller) fires when it is done. Never runs
  // inline: safe from threads that must not call CUDA (stream callbacks).
  void submit(Io& io);
  // Starts Ios together (a batch): the workers see them all at once. Same session for all.
  void submit(Io* const* ios, size_t n);

  // Counts the bytes of a finished Io under the path they took (stats::record_path), and its
  // latency and device (stats::record_finished). run() does this itself; submit()'s callers do
  // it in their completion.
  static void account(const Io& io, const IoResult& r);
  // Counts one read or write call that began at `started`, a stats::call_started() value
  // (cuFile's call statistics; latency and bytes count for successful calls only; nothing for a
  // call begun with stats off). Every API layer calls this once per call.
  static void count_call(sys::IoKind kind, const IoResult& r, uint64_t started);
  // ---- remote objects (src/io/remote; exec/remote.cpp) ----
  // The remote-object settings of the session (opening it if needed).
  Error remote_options(remote::Options* out);
  // The session (opening it if needed), for S3 writers' part buffers (Session::uploads): a
  // writer holds it while it holds buffers of its pool.
  Error remote_session(std::shared_ptr<Session>* out);
  // Reads up to `size` bytes of `obj` from `offset` into memory at `dst` (host or GPU): fewer
  // only at the object's end. GPU memory is reached through the session's pinned staging, each
  // part's copy to the GPU running while the next parts arrive; host memory takes the bytes in
  // place. On failure the bytes are 0 and `why` holds the reason; a driver close waits for it.
  IoResult read_remote(remote::Object& obj, void* dst, uint64_t size, uint64_t offset,
                       remote::Failure* why);

  // Shorthand: prepare + run.
  IoResult read_write(sys::IoKind kind, void* handle, const void* base, uint64_t size,
                      int64_t file_offset, int64_t buffer_offset);

 private:
  Runtime();
  std::shared_ptr<Session> session() const;
  // fork(): the child inherits the session but none of its worker threads, so it would wait for
  // ever on the first IO. The child forgets the session (leaked, never touched again) and starts
  // a new one at its next call. Around the fork the workers are parked (exec::
  // park_workers_for_fork), so that none holds a lock, the allocator's included, that the child
  // would inherit held.
  void before_fork();
  void after_fork_in_parent();
  void after_fork_in_child();
  Error open_locked();
  // Chooses between O_DIRECT and the page cache for the Io (route::choose_storage), asking the
  // page cache when the rules need it.
  route::StorageChoice route_storage(Io& io);
  // Runs a synchronous Io through NVIDIA's cuFileRead/cuFileWrite (path 5). nullopt when NVIDIA's
  // library failed it: the file then keeps to gpufile's own paths, which run this Io again.
  std::optional<IoResult> run_vendor(Io& io);
  // run() once route_storage() chose `storage` for the Io.
  IoResult run_routed(Io& io, const route::StorageChoice& storage);

  mutable std::mutex mu_;
  std::shared_ptr<Session> session_;
  long use_count_ = 0;
};

}  // namespace gpufile
