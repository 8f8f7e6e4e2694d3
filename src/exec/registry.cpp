// The registries of the open session: files (cuFileHandleRegister) and buffers
// (cuFileBufRegister), and what gpufile learns about a file when it is registered.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>

#include "core/align.hpp"
#include "core/log.hpp"
#include "exec/runtime.hpp"
#include "exec/session.hpp"

namespace gpufile {
namespace {

constexpr uint32_t kPageSize = 4096;

// Removes and returns the entry under `key`, or an empty value.
template <typename Map>
typename Map::mapped_type take(std::mutex& mu, Map& map, const typename Map::key_type& key) {
  std::lock_guard lock(mu);
  auto it = map.find(key);
  if (it == map.end()) return {};
  auto value = std::move(it->second);
  map.erase(it);
  return value;
}

// Opens the file again through /proc, for the access the caller's fd does not give us.
int reopen(int fd, int flags) { return sys::os().open(sys::fd_path(fd).text, flags, 0); }

// File systems that keep data in memory only: O_DIRECT there is a slower copy of the same
// bytes (measured on /dev/shm: 24.6 GiB/s direct vs 33.4 through the cache, 12 workers).
bool memory_backed(int fd) {
  struct statfs sf {};
  if (fstatfs(fd, &sf) != 0) return false;
  constexpr long kTmpfs = 0x01021994, kRamfs = static_cast<long>(0x858458f6);
  return sf.f_type == kTmpfs || sf.f_type == kRamfs;
}

// The write turn of a file in memory, shared by every handle of the same file (callers
// commonly register one fd per thread): s.files_mu held.
std::shared_ptr<std::mutex> write_turn(Session& s, const FileHandle& h) {
  std::weak_ptr<std::mutex>& slot = s.write_turns[{h.dev, h.ino}];
  if (std::shared_ptr<std::mutex> turn = slot.lock()) return turn;
  auto turn = std::make_shared<std::mutex>();
  slot = turn;
  std::erase_if(s.write_turns, [](const auto& entry) { return entry.second.expired(); });
  return turn;
}

Error fill_file_ref(Session& s, FileHandle& h, DirectIoPolicy policy) {
  exec::FileRef& r = h.ref;
  r.fd_buffered = h.user_fd;
  const bool in_memory = h.memory_backed = memory_backed(h.user_fd);
  if (in_memory) r.write_lock = write_turn(s, h);
  if (policy == DirectIoPolicy::automatic && in_memory) policy = DirectIoPolicy::never;
  if (h.user_direct) {
    int fd = reopen(h.user_fd, h.access);
    // Without a page-cache fd of our own, every unaligned head or tail would go to the
    // caller's O_DIRECT fd, where the kernel refuses it with EINVAL (found by the seeded
    // simulation, tests/sim: a write failed with EINVAL after the reopen had failed with EIO;
    // EMFILE does the same). Refuse the registration with the reopen's error instead.
    if (fd < 0) return Error::sys(-fd);
    r.fd_buffered = h.own_buffered = fd;
    // No readahead on our page-cache fd: pages read ahead asynchronously can land in the cache
    // after an O_DIRECT write of the same range has invalidated it, leaving stale data there.
    // (A read-only handle cannot write: its kept reads fill ahead, exec::fill_cache_first.)
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    if (policy != DirectIoPolicy::never) r.fd_direct = h.user_fd;
  } else if (policy != DirectIoPolicy::never) {
    int fd = reopen(h.user_fd, h.access | O_DIRECT);
    if (fd >= 0) r.fd_direct = h.own_direct = fd;
  }
  if (r.fd_direct >= 0) {
    sys::DioAlign a;
    int rc = sys::os().dio_align(r.fd_direct, &a);
    if (rc == 0) r.align = a;
    // The split between O_DIRECT and page-cache IO is made at page boundaries, not at the
    // (possibly smaller) DIO alignment: a buffered write of part of a page reads and dirties
    // the whole page, and its later writeback would overwrite bytes an O_DIRECT write put
    // into the same page.
    r.align.offset = std::max<uint32_t>(r.align.offset, kPageSize);
    // Alignments the staging grid cannot honour (or none at all) mean: no O_DIRECT here.
    if (!is_pow2(r.align.offset) || r.align.offset > kMaxDioAlign || !is_pow2(r.align.mem) ||
        r.align.mem > kMaxDioAlign)
      r.fd_direct = -1;
  }
  return Error::none();
}

Error check_fd(int fd, struct stat* st, int* flags) {
  if (fd < 0) return Error::of(Errc::invalid_argument);
  if (sys::os().fstat(fd, st) < 0) return Error::of(Errc::invalid_argument);
  if (S_ISDIR(st->st_mode)) return Error::of(Errc::invalid_file_type);
  if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode)) return Error::of(Errc::invalid_file_type);
  *flags = sys::os().get_flags(fd);
  if (*flags < 0) return Error::of(Errc::invalid_argument);
  // cuFile refuses these; O_PATH fds cannot do IO at all.
  if (*flags & (O_APPEND | O_NONBLOCK | O_NOFOLLOW | O_PATH))
    return Error::of(Errc::invalid_open_flag);
  return Error::none();
}

// Registers the file with NVIDIA's driver too, where path 5 is open: through the O_DIRECT
// descriptor (what its DMA needs), since the vendor path only takes IO that gpufile would send
// to the disk anyway. A refusal costs one log line, with NVIDIA's error, and nothing else.
void register_with_vendor(Session& s, FileHandle& h) {
  if (!s.vendor) return;
  if (h.ref.fd_direct < 0) {
    h.vendor_refusal = "not offered: no O_DIRECT on this file, gpufile reads it through the page cache";
    return;
  }
  h.vendor = s.vendor->register_file(h.ref.fd_direct, &h.vendor_refusal);
  if (h.vendor) return;
  GPUFILE_LOG(LogLevel::warn, "vendor path: NVIDIA's driver refused %s: %s; gpufile's own paths carry its IO",
              sys::file_name(h.user_fd).c_str(), h.vendor_refusal.c_str());
}

}  // namespace

// ---- files ---------------------------------------------------------------------------------------

Error Runtime::register_file(int fd, void** handle) {
  if (handle == nullptr) return Error::of(Errc::invalid_argument);
  if (Error e = ensure_open()) return e;
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  struct stat st {};
  int flags = 0;
  if (Error e = check_fd(fd, &st, &flags)) return e;
  auto h = std::make_shared<FileHandle>();
  h->user_fd = fd;
  h->dev = st.st_dev;
  h->ino = st.st_ino;
  h->access = flags & O_ACCMODE;
  h->user_direct = (flags & O_DIRECT) != 0;
  std::lock_guard lock(s->files_mu);
  for (auto& [token, other] : s->files)
    if (other->user_fd == fd) return Error::of(Errc::handle_already_registered);
  if (Error e = fill_file_ref(*s, *h, s->settings.direct_io)) return e;
  if (s->pagecache_dma && h->access != O_WRONLY)
    h->windows = s->pagecache_dma->windows_for(h->ref.fd_buffered, h->dev, h->ino);
  register_with_vendor(*s, *h);
  h->cache_facts = cache_facts(*s, *h, st);
  h->cache = route::choose_cache(h->cache_facts);
  uintptr_t token = s->next_token;
  s->next_token += 0x10;
  s->files.emplace(token, std::move(h));
  *handle = reinterpret_cast<void*>(token);
  return Error::none();
}

Error Runtime::deregister_file(void* handle) {
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  std::shared_ptr<FileHandle> h = take(s->files_mu, s->files, reinterpret_cast<uintptr_t>(handle));
  if (!h) return Error::of(Errc::handle_not_registered);
  // The caller may close the fd as soon as we return: no IO may still be using it.
  wait_for_zero(h->inflight);
  h->windows.reset();  // here, on the caller's thread: the last handle's unregisters the windows
  h->vendor.reset();   // and NVIDIA's registration goes before the caller closes the fd
  return Error::none();
}

namespace {

// What path 5 would do with a large aligned read of the file into GPU memory.
void explain_vendor(const Session& s, const FileHandle& h, Runtime::FileReport* out) {
  exec::Job job;
  job.len = 16 << 20;
  job.addr = 1ull << 32;
  if (s.gpu) job.mem.kind = cuda::MemKind::device;
  out->vendor = route::choose_vendor(vendor_facts(s, h, job, out->read, /*synchronous=*/true));
  out->vendor_state = s.vendor_why;
  out->vendor_refusal = h.vendor_refusal;
}

}  // namespace

Error Runtime::explain_file(void* handle, FileReport* out) {
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  std::shared_ptr<FileHandle> h;
  {
    std::lock_guard lock(s->files_mu);
    auto it = s->files.find(reinterpret_cast<uintptr_t>(handle));
    if (it == s->files.end()) return Error::of(Errc::handle_not_registered);
    h = it->second;
  }
  struct stat st {};
  sys::os().fstat(h->user_fd, &st);
  out->size = static_cast<uint64_t>(st.st_size);
  out->direct_capable = h->ref.fd_direct >= 0;
  out->align = h->ref.align;
  route::StorageFacts f = storage_facts(s->settings, *h, sys::IoKind::read, out->size);
  ask_residency(*h, 0, out->size, f);
  out->cachestat_ok = f.residency.has_value();
  if (f.residency) out->resident = *f.residency;
  out->read = route::choose_storage(f);
  out->copies_from_cache = route::copies_from_cache(f, out->read, /*staged=*/true);
  out->cache = h->cache;
  out->cache_room = h->cache_facts.room;
  out->cache_dma_budget = s->pagecache_dma ? s->pagecache_dma->budget() : 0;
  if (s->sharing) out->sharing_why = s->sharing->why();  // first: it waits for NVML's answer
  out->gpus_share_host = s->gpus_share_host();
  s->size_shared_pieces();
  out->shared_piece = s->exec->shared_piece();
  out->slab = s->exec->config().slab_bytes;
  out->staging_processes = s->sharing ? s->sharing->staging_processes() : 0;
  out->last_level_cache = s->last_level_cache;
  const exec::ExecutorConfig& c = s->exec->config();
  out->direct_piece = c.direct_piece_bytes > 0 ? c.direct_piece_bytes : c.slab_bytes;
  out->direct_in_flight = c.workers * std::max(c.slabs_per_worker, c.cold_slabs_per_worker);
  if (out->cache_dma_budget > 0) out->long_read_windows_from = s->long_read_windows_from();
  explain_vendor(*s, *h, out);
  return Error::none();
}

// ---- buffers -------------------------------------------------------------------------------------

Error Runtime::register_buffer(const void* base, size_t length) {
  if (base == nullptr || length == 0) return Error::of(Errc::invalid_argument);
  if (Error e = ensure_open()) return e;
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  cuda::MemInfo mem;
  if (Error e = cuda::classify(base, &mem)) return e;
  const uint64_t b = reinterpret_cast<uint64_t>(base);
  if (mem.range_size != 0 && b + length > mem.range_start + mem.range_size)
    return Error::of(Errc::pointer_range);
  auto reg = std::make_shared<BufferRegistration>();
  reg->base = b;
  reg->length = length;
  reg->mem = mem;
  // NVIDIA's driver pins GPU memory it is told of (its DMA then needs no bounce buffer); one it
  // refuses still works through its own staging, so a refusal is only noted.
  if (s->vendor && mem.kind == cuda::MemKind::device) {
    std::string why;
    reg->vendor = s->vendor->register_buffer(base, length, &why);
    if (!reg->vendor) GPUFILE_LOG(LogLevel::info, "vendor path: NVIDIA's cuFileBufRegister refused %p: %s", base, why.c_str());
  }
  std::lock_guard lock(s->buffers_mu);
  if (!s->buffers.emplace(b, std::move(reg)).second)
    return Error::of(Errc::buffer_already_registered);
  return Error::none();
}

Error Runtime::deregister_buffer(const void* base) {
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  auto reg = take(s->buffers_mu, s->buffers, reinterpret_cast<uint64_t>(base));
  if (!reg) return Error::of(Errc::buffer_not_registered);
  wait_for_zero(reg->inflight);
  reg->vendor.reset();  // now, not when the last Io lets go: the caller may free the memory next
  return Error::none();
}

}  // namespace gpufile
