// The "gpufile" HDF5 virtual file driver: HDF5's file IO, metadata and raw data, through
// gpufile's runtime (the path the cuFile API takes), so that H5Dread/H5Dwrite with a GPU
// pointer move bytes between storage and GPU memory through gpufile's staging pipeline, and
// host memory goes straight to the kernel. Semantics follow HDF5's default driver (SEC2): one
// POSIX file, end-of-address (EOA) kept by HDF5, end-of-file (EOF) tracked here, reads past the
// end of the file read zeros, truncate() sets the file's size to the EOA.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "api/file.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "cuda/memory.hpp"
#include "driver_config.hpp"
#include "exec/runtime.hpp"
#include "gpufile/hdf5.h"
#include "h5fd_abi.hpp"
#include "hdf5_api.hpp"

namespace gpufile::hdf5 {

namespace {

using abi::haddr_t;
using abi::herr_t;
using abi::hid_t;
using abi::hsize_t;

// The largest address: what off_t can reach.
constexpr haddr_t kMaxAddress = (haddr_t{1} << 63) - 1;

// One open file. HDF5 sees the head only; the rest is the driver's.
struct OpenFile {
  abi::File head;
  // Room for fields a later HDF5 might append to H5FD_t without changing the class version:
  // it would write them here rather than over the driver's own fields.
  unsigned char reserved_for_hdf5[64];
  api::File* file;  // owned; a raw pointer keeps the struct standard-layout
  int fd;
  haddr_t eoa;
  haddr_t eof;
  dev_t device;
  ino_t inode;
};
static_assert(std::is_standard_layout_v<OpenFile>, "head must sit at offset 0");

OpenFile* of(abi::File* f) { return reinterpret_cast<OpenFile*>(f); }
const OpenFile* of(const abi::File* f) { return reinterpret_cast<const OpenFile*>(f); }

struct Counters {
  std::atomic<uint64_t> files_opened{0}, reads{0}, writes{0}, bytes_read{0}, bytes_written{0},
      device_bytes_read{0}, device_bytes_written{0};
};
Counters g_counters;

std::string errno_text(int e) {
  return "errno = " + std::to_string(e) + ", error message = '" + std::strerror(e) + "'";
}

// How gpufile's errors read on HDF5's error stack. h5py takes "errno = N" to pick the Python
// exception (FileNotFoundError, PermissionError, ...), so system errors carry it.
std::string describe_for_hdf5(const Error& e) {
  if (e.code == Errc::system) return errno_text(e.sys_errno);
  return describe(e);
}

bool region_overflows(haddr_t addr, size_t size) {
  return addr == abi::kUndefinedAddress || addr > kMaxAddress || size > kMaxAddress - addr;
}

bool is_gpu_memory(const void* buf) {
  cuda::MemInfo info;
  return !cuda::classify(buf, &info) && info.needs_staging();
}

// Zeros for the part of a read past the end of the file. GPU memory is reached through the
// driver (the CPU cannot write it); host memory directly.
Error fill_zeros(void* buf, size_t size) {
  if (!is_gpu_memory(buf)) {
    std::memset(buf, 0, size);
    return Error::none();
  }
  const cuda::Driver* d = cuda::driver();
  if (d == nullptr) return Error::of(Errc::cuda);
  static const std::vector<unsigned char> zeros(1 << 20);
  cuda::MemoryContext mc(buf);
  cuda::ScopedContext ctx(mc.get());
  auto dst = reinterpret_cast<uintptr_t>(buf);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(size - done, zeros.size());
    if (int r = d->MemcpyHtoD(dst + done, zeros.data(), n); r != 0) return Error::cu(r);
    done += n;
  }
  return Error::none();
}

// ---- configuration and the runtime's session ------------------------------------------------

std::string config_string(hid_t fapl) {
  const Hdf5Api& api = hdf5_api();
  if (api.get_driver_config_str == nullptr) return {};
  const ssize_t n = api.get_driver_config_str(fapl, nullptr, 0);
  if (n <= 0) return {};
  std::string text(static_cast<size_t>(n) + 1, '\0');
  if (api.get_driver_config_str(fapl, text.data(), text.size()) < 0) return {};
  text.resize(static_cast<size_t>(n));
  return text;
}

// The runtime's session, held by the driver from its first open file on. Starting a session
// starts its workers (milliseconds), so the driver keeps it between files: opening a file then
// costs little more than SEC2's open. A configuration string takes effect when a session starts: at the
// first file, or at a file opened while no other is open whose string differs from the one in
// effect (the session restarts). While files are open, a different string is checked but not
// applied (gpufile's log says so). The session is never closed at exit: by then the CUDA driver
// may be gone, and the runtime is built to be left open (as cuFile programs leave it).
struct SessionHold {
  std::mutex mu;
  bool held = false;
  std::string config;  // the string the held session started with
  std::string warned;  // the last string logged as not applied to it
  int open_files = 0;
};
SessionHold g_session;

Error start_session(const std::vector<Setting>& settings, std::string* why) {
  if (std::string e = stage_settings(settings); !e.empty()) {
    config::clear_staged();
    *why = e;
    return Error::of(Errc::invalid_argument);
  }
  Error e = Runtime::instance().open();
  if (e) *why = "gpufile could not start: " + describe(e);
  return e;
}

// Counts one more open file on the session, starting or restarting it as said above.
Error acquire_session(const std::string& config, std::string* why) {
  std::vector<Setting> settings;
  if (std::string e = parse_config(config, &settings); !e.empty()) {
    *why = "driver configuration \"" + config + "\": " + e;
    return Error::of(Errc::invalid_argument);
  }
  std::lock_guard lock(g_session.mu);
  if (g_session.held && g_session.config != config) {
    if (g_session.open_files > 0) {
      // Once per string: HDF5 opens a file more than once while it creates it.
      if (g_session.warned != config) {
        g_session.warned = config;
        GPUFILE_LOG(LogLevel::warn,
                    "hdf5 driver: configuration \"%s\" not applied: files opened with \"%s\" "
                    "are still open and share gpufile's session",
                    config.c_str(), g_session.config.c_str());
      }
      ++g_session.open_files;
      return Error::none();
    }
    Runtime::instance().close();
    g_session.held = false;
  }
  if (!g_session.held) {
    if (Error e = start_session(settings, why)) {
      if (e.code == Errc::invalid_argument)
        *why = "driver configuration \"" + config + "\": " + *why;
      return e;
    }
    g_session.held = true;
    g_session.config = config;
    g_session.warned.clear();
  }
  ++g_session.open_files;
  return Error::none();
}

void release_session() {
  std::lock_guard lock(g_session.mu);
  --g_session.open_files;
}

int posix_flags(unsigned hdf5_flags) {
  int flags = (hdf5_flags & abi::kAccessReadWrite) ? O_RDWR : O_RDONLY;
  if (hdf5_flags & abi::kAccessTruncate) flags |= O_TRUNC;
  if (hdf5_flags & abi::kAccessCreate) flags |= O_CREAT;
  if (hdf5_flags & abi::kAccessExclusive) flags |= O_EXCL;
  return flags;
}

// ---- the callbacks ----------------------------------------------------------------------------

abi::File* open_file(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  static constexpr const char* kFn = "gpufile_open";
  if (name == nullptr || *name == '\0') {
    push_error(kFn, &Hdf5Api::major_args, &Hdf5Api::minor_bad_value, "invalid file name");
    return nullptr;
  }
  if (maxaddr == 0 || maxaddr == abi::kUndefinedAddress || maxaddr > kMaxAddress) {
    push_error(kFn, &Hdf5Api::major_args, &Hdf5Api::minor_overflow, "bogus maxaddr");
    return nullptr;
  }
  std::string why;
  if (acquire_session(config_string(fapl), &why)) {
    push_error(kFn, &Hdf5Api::major_file, &Hdf5Api::minor_open, why);
    return nullptr;
  }
  std::unique_ptr<api::File> file;
  Error e = api::File::open(name, posix_flags(flags), 0666, &file);
  struct stat st {};
  if (!e && fstat(file->fd(), &st) != 0) e = Error::sys(errno);
  if (e) {
    file.reset();
    release_session();
    push_error(kFn, &Hdf5Api::major_file, &Hdf5Api::minor_open,
               "unable to open file: name = '" + std::string(name) + "', " +
                   describe_for_hdf5(e) + ", flags = " + std::to_string(flags));
    return nullptr;
  }
  auto* f = new OpenFile{};
  f->fd = file->fd();
  f->file = file.release();
  f->eof = static_cast<haddr_t>(st.st_size);
  f->device = st.st_dev;
  f->inode = st.st_ino;
  g_counters.files_opened.fetch_add(1, std::memory_order_relaxed);
  return &f->head;
}

herr_t close_file(abi::File* head) {
  OpenFile* f = of(head);
  Error e = f->file->close();
  delete f->file;
  delete f;
  release_session();
  if (e) {
    push_error("gpufile_close", &Hdf5Api::major_io, &Hdf5Api::minor_close,
               "unable to close file: " + describe_for_hdf5(e));
    return -1;
  }
  return 0;
}

// Orders files by device, then inode: the same file opened twice compares equal.
int compare_files(const abi::File* a, const abi::File* b) {
  const OpenFile* x = of(a);
  const OpenFile* y = of(b);
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->inode != y->inode) return x->inode < y->inode ? -1 : 1;
  return 0;
}

// What HDF5 may do above the driver: SEC2's features without the data sieve. The sieve copies
// raw data through a host buffer with memcpy, which GPU memory cannot take; gpufile's own
// small-IO path and the page cache do that buffering's work below.
herr_t query(const abi::File*, unsigned long* flags) {
  if (flags) {
    *flags = abi::kFeatureAggregateMetadata | abi::kFeatureAccumulateMetadata |
             abi::kFeatureAggregateSmallData | abi::kFeaturePosixCompatHandle |
             abi::kFeatureDefaultVfdCompatible;
  }
  return 0;
}

haddr_t get_eoa(const abi::File* f, abi::MemType) { return of(f)->eoa; }

herr_t set_eoa(abi::File* f, abi::MemType, haddr_t addr) {
  of(f)->eoa = addr;
  return 0;
}

haddr_t get_eof(const abi::File* f, abi::MemType) { return of(f)->eof; }

herr_t get_handle(abi::File* f, hid_t, void** handle) {
  if (handle == nullptr) {
    push_error("gpufile_get_handle", &Hdf5Api::major_args, &Hdf5Api::minor_bad_value,
               "file handle not valid");
    return -1;
  }
  *handle = &of(f)->fd;
  return 0;
}

herr_t read(abi::File* head, abi::MemType, hid_t, haddr_t addr, size_t size, void* buf) {
  static constexpr const char* kFn = "gpufile_read";
  if (region_overflows(addr, size)) {
    push_error(kFn, &Hdf5Api::major_args, &Hdf5Api::minor_overflow,
               "addr overflow, addr = " + std::to_string(addr));
    return -1;
  }
  if (size == 0) return 0;
  OpenFile* f = of(head);
  const bool gpu = is_gpu_memory(buf);
  IoResult r = f->file->read(buf, size, static_cast<int64_t>(addr));
  if (r.ok() && r.bytes < size) {
    r.error = fill_zeros(static_cast<char*>(buf) + r.bytes, size - r.bytes);
  }
  if (!r.ok()) {
    push_error(kFn, &Hdf5Api::major_io, &Hdf5Api::minor_read,
               "file read failed: addr = " + std::to_string(addr) + ", size = " +
                   std::to_string(size) + ", " + describe_for_hdf5(r.error));
    return -1;
  }
  g_counters.reads.fetch_add(1, std::memory_order_relaxed);
  g_counters.bytes_read.fetch_add(size, std::memory_order_relaxed);
  if (gpu) g_counters.device_bytes_read.fetch_add(size, std::memory_order_relaxed);
  return 0;
}

herr_t write(abi::File* head, abi::MemType, hid_t, haddr_t addr, size_t size, const void* buf) {
  static constexpr const char* kFn = "gpufile_write";
  if (region_overflows(addr, size)) {
    push_error(kFn, &Hdf5Api::major_args, &Hdf5Api::minor_overflow,
               "addr overflow, addr = " + std::to_string(addr));
    return -1;
  }
  if (size == 0) return 0;
  OpenFile* f = of(head);
  const bool gpu = is_gpu_memory(buf);
  IoResult r = f->file->write(buf, size, static_cast<int64_t>(addr));
  if (r.ok() && r.bytes != size) r.error = Error::sys(EIO);  // never reported by gpufile
  if (!r.ok()) {
    push_error(kFn, &Hdf5Api::major_io, &Hdf5Api::minor_write,
               "file write failed: addr = " + std::to_string(addr) + ", size = " +
                   std::to_string(size) + ", " + describe_for_hdf5(r.error));
    return -1;
  }
  f->eof = std::max(f->eof, addr + size);
  g_counters.writes.fetch_add(1, std::memory_order_relaxed);
  g_counters.bytes_written.fetch_add(size, std::memory_order_relaxed);
  if (gpu) g_counters.device_bytes_written.fetch_add(size, std::memory_order_relaxed);
  return 0;
}

// Makes the file exactly EOA bytes long, as SEC2 does (growing it when HDF5 allocated space
// it has not written yet).
herr_t truncate(abi::File* head, hid_t, abi::hbool_t) {
  OpenFile* f = of(head);
  if (f->eoa == f->eof) return 0;
  if (ftruncate(f->fd, static_cast<off_t>(f->eoa)) != 0) {
    push_error("gpufile_truncate", &Hdf5Api::major_io, &Hdf5Api::minor_seek,
               "unable to extend file properly, " + errno_text(errno));
    return -1;
  }
  f->eof = f->eoa;
  return 0;
}

// Advisory whole-file locks (flock), shared for readers and exclusive for writers, never
// waiting. File systems without flock (ENOSYS) are let through, as SEC2 does when told to
// ignore disabled locks.
herr_t lock(abi::File* head, abi::hbool_t read_write) {
  const int op = (read_write ? LOCK_EX : LOCK_SH) | LOCK_NB;
  if (flock(of(head)->fd, op) == 0 || errno == ENOSYS) return 0;
  push_error("gpufile_lock", &Hdf5Api::major_file, &Hdf5Api::minor_lock,
             "unable to lock file, " + errno_text(errno));
  return -1;
}

herr_t unlock(abi::File* head) {
  if (flock(of(head)->fd, LOCK_UN) == 0 || errno == ENOSYS) return 0;
  push_error("gpufile_unlock", &Hdf5Api::major_file, &Hdf5Api::minor_lock,
             "unable to unlock file, " + errno_text(errno));
  return -1;
}

herr_t delete_file(const char* name, hid_t) {
  if (name != nullptr && unlink(name) == 0) return 0;
  push_error("gpufile_delete", &Hdf5Api::major_file, &Hdf5Api::minor_delete,
             "unable to delete file, " + errno_text(name ? errno : EINVAL));
  return -1;
}

herr_t terminate() { return 0; }

abi::Class make_class() {
  abi::Class c{};
  c.version = abi::kClassVersion;
  c.value = GPUFILE_HDF5_DRIVER_VALUE;
  c.name = GPUFILE_HDF5_DRIVER_NAME;
  c.maxaddr = kMaxAddress;
  c.fc_degree = abi::kCloseWeak;
  c.terminate = terminate;
  c.open = open_file;
  c.close = close_file;
  c.cmp = compare_files;
  c.query = query;
  c.get_eoa = get_eoa;
  c.set_eoa = set_eoa;
  c.get_eof = get_eof;
  c.get_handle = get_handle;
  c.read = read;
  c.write = write;
  c.truncate = truncate;
  c.lock = lock;
  c.unlock = unlock;
  c.del = delete_file;
  // Free lists: metadata in one pool, raw data and global heaps in another (SEC2's choice).
  const abi::MemType pools[abi::kMemTypes] = {abi::kMemSuper, abi::kMemSuper, abi::kMemSuper,
                                              abi::kMemRaw,   abi::kMemRaw,   abi::kMemSuper,
                                              abi::kMemSuper};
  std::copy(std::begin(pools), std::end(pools), c.fl_map);
  return c;
}

const abi::Class g_class = make_class();

static_assert(GPUFILE_HDF5_DRIVER_VALUE >= abi::kFirstUnregisteredValue &&
              GPUFILE_HDF5_DRIVER_VALUE < abi::kFirstRegisteredValue);

}  // namespace

}  // namespace gpufile::hdf5

// ---- the C ABI: plugin entry points and the public header ------------------------------------

namespace h5 = gpufile::hdf5;

extern "C" {

// HDF5's plugin loader asks every library in HDF5_PLUGIN_PATH what it is, then for its class.
__attribute__((visibility("default"))) int H5PLget_plugin_type(void) {
  return h5::abi::kPluginVfd;
}

__attribute__((visibility("default"))) const void* H5PLget_plugin_info(void) {
  // The caller is the libhdf5 loading us: later H5* look-ups go to that library.
  h5::remember_loader(__builtin_return_address(0));
  return &h5::g_class;
}

__attribute__((visibility("default"))) herr_t H5Pset_fapl_gpufile(hid_t fapl,
                                                                  const char* config) {
  const h5::Hdf5Api& api = h5::hdf5_api();
  if (api.set_driver_by_name == nullptr || api.is_driver_registered_by_name == nullptr ||
      api.register_driver == nullptr) {
    GPUFILE_LOG(gpufile::LogLevel::error,
                "H5Pset_fapl_gpufile: no HDF5 1.14 or later in this process (%s)",
                api.library.empty() ? "no libhdf5 found" : api.library.c_str());
    return -1;
  }
  // Registered once per library lifetime; H5Pset_driver_by_name then finds it by name without
  // searching HDF5_PLUGIN_PATH.
  const int registered = api.is_driver_registered_by_name(GPUFILE_HDF5_DRIVER_NAME);
  if (registered < 0) return -1;
  if (registered == 0 && api.register_driver(&h5::g_class) < 0) return -1;
  return api.set_driver_by_name(fapl, GPUFILE_HDF5_DRIVER_NAME, config ? config : "");
}

__attribute__((visibility("default"))) int gpufile_hdf5_get_counters(
    gpufile_hdf5_counters* out) {
  if (out == nullptr) return -1;
  const auto& c = h5::g_counters;
  out->files_opened = c.files_opened.load();
  out->reads = c.reads.load();
  out->writes = c.writes.load();
  out->bytes_read = c.bytes_read.load();
  out->bytes_written = c.bytes_written.load();
  out->device_bytes_read = c.device_bytes_read.load();
  out->device_bytes_written = c.device_bytes_written.load();
  return 0;
}

__attribute__((visibility("default"))) size_t gpufile_hdf5_get_stats_json(char* buf,
                                                                          size_t size) {
  const std::string json =
      gpufile::stats::summary_json(gpufile::stats::snapshot(), gpufile::cuda::live_pinned_bytes());
  if (buf != nullptr && size > json.size()) std::memcpy(buf, json.c_str(), json.size() + 1);
  return json.size();
}

__attribute__((visibility("default"))) void gpufile_hdf5_reset_stats(void) {
  gpufile::stats::reset();
}

}  // extern "C"
