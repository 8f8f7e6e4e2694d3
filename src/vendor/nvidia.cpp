#include "vendor/nvidia.hpp"

#define GPUFILE_NO_CUDA_H 1
#include <cufile.h>
#include <dlfcn.h>
#include <elf.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/log.hpp"

// Every gpufile library carries this ELF note (name "gpufile"), in a PT_NOTE segment: how the
// loader below knows a candidate for NVIDIA's library is in fact gpufile (ours exports the same
// names and has the same SONAME). A note, not an exported symbol: libcufile.so.0 must export
// exactly cuFile's symbols (tests/abi).
asm(R"(
  .pushsection .note.gpufile, "a", @note
  .balign 4
  .long 8
  .long 4
  .long 0x67707566
  .asciz "gpufile"
  .balign 4
  .long 1
  .popsection
)");

namespace gpufile::vendor {

// NVIDIA's entry points, resolved on its handle. Signatures as in include/cufile.h.
struct Api {
  CUfileError_t (*DriverOpen)() = nullptr;
  CUfileError_t (*DriverClose)() = nullptr;
  CUfileError_t (*DriverGetProperties)(CUfileDrvProps_t*) = nullptr;
  CUfileError_t (*HandleRegister)(CUfileHandle_t*, CUfileDescr_t*) = nullptr;
  void (*HandleDeregister)(CUfileHandle_t) = nullptr;
  CUfileError_t (*BufRegister)(const void*, size_t, int) = nullptr;
  CUfileError_t (*BufDeregister)(const void*) = nullptr;
  ssize_t (*Read)(CUfileHandle_t, void*, size_t, off_t, off_t) = nullptr;
  ssize_t (*Write)(CUfileHandle_t, const void*, size_t, off_t, off_t) = nullptr;
};

namespace {

constexpr unsigned kP2PSupportedBit = 4;  // CUfileFeatureFlags_t P2P_SUPPORTED (cuFile 1.17)

// "file descriptor is not registered (5027)": the text cuFile's header gives the code.
std::string describe_status(const Api&, int code) {
  return std::string(cufileop_status_error(static_cast<CUfileOpError>(code))) + " (" +
         std::to_string(code) + ")";
}

std::string describe_error(const Api& api, CUfileError_t e) {
  std::string out = describe_status(api, e.err);
  if (e.err == CU_FILE_CUDA_DRIVER_ERROR) out += ", CUresult " + std::to_string(e.cu_err);
  return out;
}

// cuFileRead/Write report failure as -1 with errno (a cuFile code or an errno value), or as a
// negative cuFile code or -errno: every encoding the spec has seen (spec §2).
std::string describe_io_failure(const Api& api, ssize_t ret, int saved_errno) {
  const int code = ret == -1 ? saved_errno : static_cast<int>(-ret);
  if (code > CUFILEOP_BASE_ERR) return describe_status(api, code);
  return std::string(std::strerror(code)) + " (errno " + std::to_string(code) + ")";
}

// ---- is it gpufile? -------------------------------------------------------------------------------

bool note_names_gpufile(const char* p, size_t size) {
  size_t at = 0;
  while (at + sizeof(ElfW(Nhdr)) <= size) {
    ElfW(Nhdr) n;
    std::memcpy(&n, p + at, sizeof n);
    const char* name = p + at + sizeof n;
    if (n.n_namesz == 8 && at + sizeof n + 8 <= size && std::memcmp(name, "gpufile", 8) == 0)
      return true;
    at += sizeof n + ((n.n_namesz + 3) & ~3u) + ((n.n_descsz + 3) & ~3u);
  }
  return false;
}

struct NoteSearch {
  ElfW(Addr) base;
  bool found = false;
};

int search_object(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<NoteSearch*>(data);
  if (info->dlpi_addr != s->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    if (note_names_gpufile(p, ph.p_memsz)) s->found = true;
  }
  return 1;
}

// Whether the loaded object behind `handle` carries gpufile's note.
bool is_gpufile(void* handle) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return false;
  NoteSearch s{map->l_addr};
  dl_iterate_phdr(search_object, &s);
  return s.found;
}

// ---- loading ----------------------------------------------------------------------------------------

// Sanitizer runtimes refuse RTLD_DEEPBIND; those builds only ever load the test double, which
// binds its own calls itself.
int open_flags() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return RTLD_NOW | RTLD_LOCAL;
#else
  return RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
}

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// Resolves NVIDIA's entry points; the name of the first one missing, or empty.
std::string bind_api(void* lib, Api& a) {
  if (!bind(lib, "cuFileDriverOpen", a.DriverOpen)) return "cuFileDriverOpen";
  if (!bind(lib, "cuFileDriverClose_v2", a.DriverClose) && !bind(lib, "cuFileDriverClose", a.DriverClose))
    return "cuFileDriverClose";
  if (!bind(lib, "cuFileDriverGetProperties", a.DriverGetProperties)) return "cuFileDriverGetProperties";
  if (!bind(lib, "cuFileHandleRegister", a.HandleRegister)) return "cuFileHandleRegister";
  if (!bind(lib, "cuFileHandleDeregister", a.HandleDeregister)) return "cuFileHandleDeregister";
  if (!bind(lib, "cuFileBufRegister", a.BufRegister)) return "cuFileBufRegister";
  if (!bind(lib, "cuFileBufDeregister", a.BufDeregister)) return "cuFileBufDeregister";
  if (!bind(lib, "cuFileRead", a.Read)) return "cuFileRead";
  if (!bind(lib, "cuFileWrite", a.Write)) return "cuFileWrite";
  return {};
}

// Loads `path` once per process and never unloads it (its threads and static destructors may
// outlive any session, as with the CUDA driver). Null with `why` when it is unusable.
const Api* load(const std::string& path, std::string* why) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, const Api*>();  // leaked on purpose
  std::lock_guard lock(mu);
  if (auto it = loaded->find(path); it != loaded->end()) return it->second;
  void* lib = dlopen(path.c_str(), open_flags());
  if (lib == nullptr) {
    const char* err = dlerror();
    *why = "cannot load " + path + " (" + (err ? err : "unknown reason") + ")";
    return nullptr;
  }
  if (is_gpufile(lib)) {
    dlclose(lib);
    *why = path + " is gpufile's own libcufile, not NVIDIA's: refused";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  if (std::string missing = bind_api(lib, *api); !missing.empty()) {
    dlclose(lib);
    *why = path + " lacks " + missing + ": not a cuFile library";
    return nullptr;
  }
  return (*loaded)[path] = api.release();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void add_glob(const std::string& pattern, std::vector<std::string>& out) {
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
}

// The site-packages directory gpufile's own wheel sits in, if it does: NVIDIA's cuFile wheels
// install next to it (nvidia/cufile/lib for CUDA 12, nvidia/cu13/lib for CUDA 13).
std::string own_site_packages() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&search_paths), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string p = info.dli_fname;
  for (const char* dir : {"/site-packages/", "/dist-packages/"})
    if (size_t at = p.rfind(dir); at != std::string::npos) return p.substr(0, at + std::strlen(dir) - 1);
  return {};
}

void add_wheel_dirs(const std::string& site, std::vector<std::string>& out) {
  out.push_back(site + "/nvidia/cufile/lib/libcufile.so.0");
  out.push_back(site + "/nvidia/cu13/lib/libcufile.so.0");
}

std::string search(std::string* tried) {
  for (const std::string& path : search_paths()) {
    if (exists(path)) return path;
    *tried += (tried->empty() ? "" : ", ") + path;
  }
  return {};
}

std::shared_ptr<Driver> open_driver(const Api* api, const std::string& path, std::string* why) {
  if (CUfileError_t e = api->DriverOpen(); e.err != CU_FILE_SUCCESS) {
    *why = "NVIDIA's cuFileDriverOpen failed: " + describe_error(*api, e);
    return nullptr;
  }
  CUfileDrvProps_t props{};
  DriverFacts facts;
  if (CUfileError_t e = api->DriverGetProperties(&props); e.err == CU_FILE_SUCCESS) {
    facts.nvfs_major = props.nvfs.major_version;
    facts.nvfs_minor = props.nvfs.minor_version;
    facts.p2pdma = (props.fflags >> kP2PSupportedBit) & 1u;
  }
  return std::make_shared<Driver>(api, path, facts);
}

}  // namespace

std::string DriverFacts::describe() const {
  if (!gds()) return "compatibility mode only (no nvidia-fs, no P2PDMA)";
  std::string out;
  if (nvfs_major != 0 || nvfs_minor != 0)
    out = "nvidia-fs " + std::to_string(nvfs_major) + "." + std::to_string(nvfs_minor);
  if (p2pdma) out += std::string(out.empty() ? "" : ", ") + "PCI P2PDMA";
  return out;
}

bool nvidia_fs_present() { return exists("/proc/driver/nvidia-fs/version") || exists("/dev/nvidia-fs0"); }

std::vector<std::string> search_paths() {
  std::vector<std::string> out;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root != nullptr && *root != '\0')
      out.push_back(std::string(root) + "/lib64/libcufile.so.0");
  out.push_back("/usr/local/cuda/lib64/libcufile.so.0");
#if defined(__aarch64__)
  out.push_back("/usr/local/cuda/targets/sbsa-linux/lib/libcufile.so.0");
#else
  out.push_back("/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0");
#endif
  if (std::string site = own_site_packages(); !site.empty()) add_wheel_dirs(site, out);
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0') {
    std::vector<std::string> sites;
    add_glob(std::string(venv) + "/lib/python3*/site-packages", sites);
    for (const std::string& site : sites) add_wheel_dirs(site, out);
  }
  std::vector<std::string> system_sites;
  add_glob("/usr/local/lib/python3*/dist-packages", system_sites);
  add_glob("/usr/local/lib/python3*/site-packages", system_sites);
  for (const std::string& site : system_sites) add_wheel_dirs(site, out);
  out.push_back("/usr/lib/x86_64-linux-gnu/libcufile.so.0");
  return out;
}

std::shared_ptr<Driver> Driver::open(const Settings& s, std::string* why) {
  if (s.vendor == VendorPolicy::off) return *why = "off (gpufile.vendor)", nullptr;
  std::string path = s.vendor_library;
  if (path.empty()) {
    if (s.vendor == VendorPolicy::automatic && !nvidia_fs_present() && !s.use_pci_p2pdma) {
      *why = "not loaded: no nvidia-fs on this machine and P2PDMA not asked for "
             "(properties.use_pci_p2pdma), so NVIDIA's library could only add a layer";
      return nullptr;
    }
    std::string tried;
    path = search(&tried);
    if (path.empty()) return *why = "no NVIDIA libcufile found (looked at " + tried + ")", nullptr;
  }
  const Api* api = load(path, why);
  return api != nullptr ? open_driver(api, path, why) : nullptr;
}

Driver::~Driver() { api_->DriverClose(); }

std::shared_ptr<Driver::File> Driver::register_file(int fd, std::string* why) {
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  if (CUfileError_t e = api_->HandleRegister(&h, &d); e.err != CU_FILE_SUCCESS) {
    *why = describe_error(*api_, e);
    return nullptr;
  }
  return std::make_shared<File>(shared_from_this(), h);
}

Driver::File::~File() { driver_->api_->HandleDeregister(handle_); }

std::shared_ptr<Driver::Buffer> Driver::register_buffer(const void* base, size_t length,
                                                        std::string* why) {
  if (CUfileError_t e = api_->BufRegister(base, length, 0); e.err != CU_FILE_SUCCESS) {
    *why = describe_error(*api_, e);
    return nullptr;
  }
  return std::make_shared<Buffer>(shared_from_this(), base);
}

Driver::Buffer::~Buffer() { driver_->api_->BufDeregister(base_); }

namespace {
Outcome outcome(const Api& api, ssize_t ret, int saved_errno) {
  if (ret >= 0) return {static_cast<uint64_t>(ret), true, {}};
  return {0, false, describe_io_failure(api, ret, saved_errno)};
}
}  // namespace

Outcome Driver::read(const File& f, void* base, size_t size, off_t file_offset, off_t buffer_offset) {
  errno = 0;
  const ssize_t ret = api_->Read(f.handle(), base, size, file_offset, buffer_offset);
  return outcome(*api_, ret, errno);
}

Outcome Driver::write(const File& f, const void* base, size_t size, off_t file_offset,
                      off_t buffer_offset) {
  errno = 0;
  const ssize_t ret = api_->Write(f.handle(), base, size, file_offset, buffer_offset);
  return outcome(*api_, ret, errno);
}

}  // namespace gpufile::vendor
