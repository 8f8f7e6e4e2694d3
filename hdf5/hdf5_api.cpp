#include "hdf5_api.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <mutex>

#include "core/log.hpp"
#include "core/redact.hpp"

namespace gpufile::hdf5 {

namespace {

std::mutex g_mu;
void* g_loader = nullptr;       // dlopen handle of the libhdf5 that loaded the plugin
std::string g_loader_path;
bool g_resolved = false;
Hdf5Api g_api;

bool has_hdf5(void* handle) { return handle != nullptr && dlsym(handle, "H5open") != nullptr; }

// The loaded objects whose file name starts with libhdf5: h5py's copy is named like
// libhdf5-8c29085d.so.310.5.1, Debian's libhdf5_serial.so.310, conda's libhdf5.so.310. A
// companion (libhdf5_hl, libhdf5_cpp) does no harm: dlsym on its handle searches its
// dependencies too, so the functions come from the libhdf5 it was linked against.
bool looks_like_libhdf5(const char* path) {
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  return std::strncmp(base, "libhdf5", 7) == 0;
}

struct Search {
  void* handle = nullptr;
  std::string path;
};

int visit_object(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (info->dlpi_name == nullptr || !looks_like_libhdf5(info->dlpi_name)) return 0;
  // RTLD_NOLOAD: only a handle on what is loaded already, never a second copy.
  void* h = dlopen(info->dlpi_name, RTLD_NOLOAD | RTLD_LAZY);
  if (!has_hdf5(h)) {
    if (h) dlclose(h);
    return 0;
  }
  search->handle = h;
  search->path = info->dlpi_name;
  return 1;
}

// Where to look, best first (see hdf5_api()).
Search find_library() {
  if (g_loader) return {g_loader, g_loader_path};
  if (has_hdf5(RTLD_DEFAULT)) return {RTLD_DEFAULT, "the program's global scope"};
  Search search;
  dl_iterate_phdr(visit_object, &search);
  return search;
}

template <typename T>
void bind(void* handle, T& member, const char* symbol) {
  member = reinterpret_cast<T>(dlsym(handle, symbol));
}

void resolve(void* h, Hdf5Api& a) {
  bind(h, a.get_libversion, "H5get_libversion");
  bind(h, a.get_driver_config_str, "H5Pget_driver_config_str");
  bind(h, a.register_driver, "H5FDregister");
  bind(h, a.is_driver_registered_by_name, "H5FDis_driver_registered_by_name");
  bind(h, a.set_driver_by_name, "H5Pset_driver_by_name");
  bind(h, a.push_error, "H5Epush2");
  bind(h, a.error_class, "H5E_ERR_CLS_g");
  bind(h, a.major_file, "H5E_FILE_g");
  bind(h, a.major_io, "H5E_IO_g");
  bind(h, a.major_args, "H5E_ARGS_g");
  bind(h, a.minor_open, "H5E_CANTOPENFILE_g");
  bind(h, a.minor_close, "H5E_CANTCLOSEFILE_g");
  bind(h, a.minor_read, "H5E_READERROR_g");
  bind(h, a.minor_write, "H5E_WRITEERROR_g");
  bind(h, a.minor_seek, "H5E_SEEKERROR_g");
  bind(h, a.minor_overflow, "H5E_OVERFLOW_g");
  bind(h, a.minor_bad_value, "H5E_BADVALUE_g");
  bind(h, a.minor_lock, "H5E_CANTLOCKFILE_g");
  bind(h, a.minor_delete, "H5E_CANTDELETEFILE_g");
  if (a.get_libversion) a.get_libversion(&a.major, &a.minor, &a.release);
}

}  // namespace

void remember_loader(const void* caller_address) {
  Dl_info info{};
  if (dladdr(caller_address, &info) == 0 || info.dli_fname == nullptr) return;
  void* h = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
  if (!has_hdf5(h)) {
    if (h) dlclose(h);
    return;
  }
  std::lock_guard lock(g_mu);
  if (g_loader == h) {
    dlclose(h);  // one reference kept is enough
    return;
  }
  // A different libhdf5 than the one resolved before (two copies in one process): switch, so
  // that the driver talks to the library that calls it. The handle is kept for the process's
  // life: the plugin cannot outlive the library that loaded it anyway.
  g_loader = h;
  g_loader_path = info.dli_fname;
  g_resolved = false;
}

const Hdf5Api& hdf5_api() {
  std::lock_guard lock(g_mu);
  if (g_resolved) return g_api;
  g_api = Hdf5Api{};
  Search where = find_library();
  if (where.handle) {
    resolve(where.handle, g_api);
    g_api.library = where.path;
  }
  g_resolved = true;
  return g_api;
}

void push_error(const char* function, const abi::hid_t* Hdf5Api::*major,
                const abi::hid_t* Hdf5Api::*minor, const std::string& message) {
  const Hdf5Api& a = hdf5_api();
  // A file name on HDF5's error stack (printed, and turned into Python exceptions by h5py) shows
  // no credentials should it be a URL (core/redact.hpp); the log redacts its own lines.
  const std::string shown = redact_text(message);
  const abi::hid_t* maj = a.*major;
  const abi::hid_t* min = a.*minor;
  if (a.push_error == nullptr || a.error_class == nullptr || maj == nullptr || min == nullptr) {
    GPUFILE_LOG(LogLevel::error, "hdf5 driver: %s: %s", function, shown.c_str());
    return;
  }
  // The message goes through "%s": a file name with a '%' in it is not a format.
  a.push_error(abi::kDefault, __FILE__, function, __LINE__, *a.error_class, *maj, *min, "%s",
               shown.c_str());
}

}  // namespace gpufile::hdf5
