// Inside the runtime (not for other layers): one open driver session, the registered files and
// buffers it holds, and the counters that let deregistration and close wait for IO in flight.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/settings.hpp"
#include "cuda/memory.hpp"
#include "exec/cache_windows.hpp"
#include "exec/caller.hpp"
#include "exec/executor.hpp"
#include "exec/host_sharing.hpp"
#include "exec/job.hpp"
#include "route/route.hpp"
#include "vendor/nvidia.hpp"

namespace gpufile {

struct FileHandle {
  int user_fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  int access = 0;  // O_RDONLY / O_WRONLY / O_RDWR
  bool user_direct = false;
  bool memory_backed = false;  // tmpfs / ramfs
  int own_buffered = -1;       // fds gpufile opened itself and closes
  int own_direct = -1;
  exec::FileRef ref;
  exec::CacheGuess guess;
  // Its page-cache windows (exec/cache_windows.hpp), shared with the inode's other handles;
  // null when its reads never take that path.
  std::shared_ptr<exec::FileWindows> windows;
  // Its registration with NVIDIA's driver (path 5), or why there is none.
  std::shared_ptr<vendor::Driver::File> vendor;
  std::string vendor_refusal;
  // Set once an IO through NVIDIA's library failed: the file keeps to gpufile's paths after.
  std::atomic<bool> vendor_dropped{false};
  // Whether reads that miss the page cache go through it (gpufile.cache_policy), chosen when
  // the file was registered, and the facts it was chosen from.
  route::CacheFacts cache_facts;
  route::CacheChoice cache;
  std::atomic<int> inflight{0};

  ~FileHandle();
};

struct BufferRegistration {
  uint64_t base = 0;
  uint64_t length = 0;
  // What the driver said the memory is when it was registered: the caller promises it stays
  // allocated until deregistered, so IO on it need not ask again (one driver call per IO).
  cuda::MemInfo mem;
  // Registered with NVIDIA's driver too (GPU memory, while path 5 is open), or null.
  std::shared_ptr<vendor::Driver::Buffer> vendor;
  std::atomic<int> inflight{0};
};

struct Session {
  Settings settings;
  // NVIDIA's libcufile with its driver open (path 5), or null; vendor_why says why not, or
  // why it is open but unused (compatibility mode only).
  std::shared_ptr<vendor::Driver> vendor;
  std::string vendor_why;
  bool vendor_compat_only = false;  // it loaded, reported no GDS, and was closed again (auto)
  bool vendor_gds() const { return vendor && vendor->facts().gds(); }
  std::unique_ptr<exec::Executor> exec;
  exec::StagingPool small;  // callers' staging for small IO (up to small_io_kb)
  exec::StagingPool slabs;  // callers' staging for the pieces of larger IO (one slab each)
  std::shared_ptr<exec::PageCacheDma> pagecache_dma;  // null: that path is off
  exec::StagingPool remote; // remote reads into GPU memory: one buffer per ranged GET in flight
  exec::StagingPool uploads; // S3 writers' part buffers (api/remote_file.cpp), of one upload part
  bool gpu = false;
  // Whether other GPUs share the host's memory with this process's staging (a launcher's
  // variables, this process's own GPUs, NVML's list of the host's processes): long reads then
  // make page-cache windows (gpufile.pagecache_dma_long_read_mb).
  std::unique_ptr<exec::HostSharing> sharing;
  bool gpus_share_host(int device = -1) const { return sharing && sharing->shared(device); }
  // Whether a read of `len` bytes into GPU `device` makes the windows of bytes read before as
  // it goes: at least gpufile.pagecache_dma_long_read_mb long (0: none is), where GPUs share
  // the host. Asks HostSharing only for reads that long (it takes a lock).
  bool long_read_makes_windows(uint64_t len, int device) const {
    return is_long_read(len) && gpus_share_host(device);
  }
  // A long read's first reading: puts the question to NVML (once), so that its answer is there
  // by the second reading, when windows may be made; and sizes staged pieces by what is known
  // of the host's sharing by then.
  void note_long_read(uint64_t len) const {
    if (!sharing || !is_long_read(len)) return;
    sharing->ask();
    size_shared_pieces();
  }
  // The host's last-level cache in bytes (0: unknown), read at open.
  uint64_t last_level_cache = 0;
  // Sets the workers' largest staged piece of cached bytes from the processes known to share
  // the host now (exec::shared_piece_bytes): at open, at long reads, at `gpufile check`.
  void size_shared_pieces() const;
  // The shortest read that makes them now (gpufile check); 0: none does.
  uint64_t long_read_windows_from() const { return gpus_share_host() ? long_read_bytes() : 0; }
  // gpufile.pagecache_dma_long_read_mb in bytes; 0: no read is long enough.
  uint64_t long_read_bytes() const { return uint64_t{settings.pagecache_dma_long_read_mb} << 20; }
  bool is_long_read(uint64_t len) const {
    return long_read_bytes() > 0 && len >= long_read_bytes();
  }
  std::string placement_why;  // the NUMA placement decision, in one sentence
  std::atomic<int> inflight{0};
  std::atomic<int> sync_calls{0};  // synchronous calls in Runtime::run right now

  std::mutex files_mu;
  std::unordered_map<uintptr_t, std::shared_ptr<FileHandle>> files;  // by handle token
  uintptr_t next_token = 0x1000;
  // Files in memory write one at a time (exec::pwrite_in_turn), whichever handle writes.
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<std::mutex>> write_turns;  // files_mu

  std::mutex buffers_mu;
  std::map<uint64_t, std::shared_ptr<BufferRegistration>> buffers;  // by base address

  ~Session() { exec.reset(); }  // workers stop before the pools they use go away
};

// What the routing needs to know of a file to choose between O_DIRECT and the page cache for an
// IO of `len` bytes; everything but the residency and whether the caller waits.
route::StorageFacts storage_facts(const Settings& s, const FileHandle& h, sys::IoKind kind,
                                  uint64_t len);
// Asks the page cache about [off, off+len) when the facts need it (one cachestat call), and
// updates the file's guess with the answer.
void ask_residency(FileHandle& h, uint64_t off, uint64_t len, route::StorageFacts& f);

// The facts route::choose_cache weighs for `h` (registered with NVIDIA's driver where it will
// be), `st` its fstat; the memory the page cache can hold is read only where the policy asks.
route::CacheFacts cache_facts(const Session& s, const FileHandle& h, const struct stat& st);

// The facts route::choose_vendor weighs for an IO of `job` on `h` (storage chosen already).
route::VendorFacts vendor_facts(const Session& s, const FileHandle& h, const exec::Job& job,
                                const route::StorageChoice& storage, bool synchronous);

// Sets up a session from its settings: the executor and its workers, the callers' staging.
Error start_session(Session& s);
// The placement decision, then a line per placed worker: its node, CPUs, where its staging went.
std::vector<std::string> describe_placement(const Session& s);

// The largest DIO alignment the staging grid supports; files demanding more use the page cache.
inline constexpr uint32_t kMaxDioAlign = 4096;

// Waits until `counter` drops to zero.
void wait_for_zero(const std::atomic<int>& counter);
// Counts one off; the last one wakes wait_for_zero.
void drop(std::atomic<int>& counter);

}  // namespace gpufile
