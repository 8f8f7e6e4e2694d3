// NVIDIA's own libcufile, loaded at run time for path 5, "vendor direct" (DESIGN.md): on a
// machine where nvidia-fs (or NVIDIA's P2PDMA mode) really moves storage DMA into GPU memory, no
// copy through host memory can match it, so large aligned IO into GPU memory goes through
// NVIDIA's cuFileRead/cuFileWrite there. Everything else stays on gpufile's own paths.
//
// gpufile's libcufile.so.0 exports the same names as NVIDIA's, so NVIDIA's library is opened
// with RTLD_LOCAL (and RTLD_DEEPBIND: its calls to its own entry points must not bind to ours)
// and every entry point is looked up with dlsym on its handle. A library that turns out to be a
// gpufile build (it carries the ELF note this module plants) is refused: it would call itself.
//
// In CI a test double (tests/support/fakecufile) stands in for NVIDIA's library.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/settings.hpp"

namespace gpufile::vendor {

struct Api;  // NVIDIA's entry points (nvidia.cpp)

// What NVIDIA's driver said about itself at open (cuFileDriverGetProperties).
struct DriverFacts {
  unsigned nvfs_major = 0;  // the nvidia-fs kernel module's version; 0.0 without it
  unsigned nvfs_minor = 0;
  bool p2pdma = false;      // PCI P2PDMA without nvidia-fs (feature bit 4, cuFile 1.17+)
  // True GPUDirect Storage: nvidia-fs, or P2PDMA. Without either NVIDIA's library runs in
  // compatibility mode, a POSIX read and a copy: gpufile's own paths do that better.
  bool gds() const { return nvfs_major != 0 || nvfs_minor != 0 || p2pdma; }
  std::string describe() const;
};

// An IO's result through NVIDIA's library: the bytes it moved, or its error in words.
struct Outcome {
  uint64_t bytes = 0;
  bool ok = false;
  std::string error;
};

// NVIDIA's library with its driver open, for one gpufile session. Shared by the session and by
// every file and buffer registered with it, so that the driver closes after the last of them.
class Driver : public std::enable_shared_from_this<Driver> {
 public:
  // Loads the library the settings name (or the first one the search finds) and opens its
  // driver. Null, with the reason in `why`, when there is none, it is gpufile itself, or it
  // fails to open. With gpufile.vendor = auto and no library configured, the search only runs
  // where nvidia-fs is loaded or P2PDMA was asked for: elsewhere NVIDIA's library could only
  // run in compatibility mode, and its open costs most of a second.
  static std::shared_ptr<Driver> open(const Settings& s, std::string* why);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const std::string& library() const { return library_; }
  const DriverFacts& facts() const { return facts_; }

  // A file registered with NVIDIA's driver; deregistered there when the last reference goes.
  class File;
  // Null when NVIDIA's driver refuses the file; `why` then holds its error.
  std::shared_ptr<File> register_file(int fd, std::string* why);

  // A buffer registered with NVIDIA's driver; deregistered there when the last reference goes.
  class Buffer;
  std::shared_ptr<Buffer> register_buffer(const void* base, size_t length, std::string* why);

  // NVIDIA's cuFileRead/cuFileWrite of `size` bytes at base + buffer_offset.
  Outcome read(const File& f, void* base, size_t size, off_t file_offset, off_t buffer_offset);
  Outcome write(const File& f, const void* base, size_t size, off_t file_offset,
                off_t buffer_offset);

  Driver(const Api* api, std::string library, DriverFacts facts)
      : api_(api), library_(std::move(library)), facts_(facts) {}

 private:
  const Api* api_;
  std::string library_;
  DriverFacts facts_;
};

class Driver::File {
 public:
  File(std::shared_ptr<Driver> d, void* handle) : driver_(std::move(d)), handle_(handle) {}
  ~File();
  void* handle() const { return handle_; }

 private:
  std::shared_ptr<Driver> driver_;
  void* handle_;
};

class Driver::Buffer {
 public:
  Buffer(std::shared_ptr<Driver> d, const void* base) : driver_(std::move(d)), base_(base) {}
  ~Buffer();

 private:
  std::shared_ptr<Driver> driver_;
  const void* base_;
};

// Where the search looks when no library is configured, in order (tests print it).
std::vector<std::string> search_paths();
// Whether this machine has nvidia-fs loaded (its /proc entry or device nodes).
bool nvidia_fs_present();

}  // namespace gpufile::vendor
