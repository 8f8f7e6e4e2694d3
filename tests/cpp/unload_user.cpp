// A plugin as an application might load with dlopen: it links libgpufile.so and reads a remote
// object with a Future (which runs on the remote pool's threads). test_unload.cpp loads it,
// calls it, and unloads it again, and with it libgpufile.so.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <gpufile/gpufile.hpp>

// 0 when `url` holds `size` bytes equal to `expected`; else 1 and why on stderr.
extern "C" __attribute__((visibility("default"))) int gpufile_unload_read(const char* url,
                                                                          const unsigned char* expected,
                                                                          unsigned long size) {
  try {
    gpufile::set_setting("gpufile.remote_part_kb", 64);  // many parts: several pool threads
    gpufile::set_setting("gpufile.remote_concurrency", 8);
    std::vector<unsigned char> got(size);
    {
      gpufile::RemoteFile f(url);
      gpufile::Future later = f.pread(got.data(), size);
      if (later.get() != size) throw std::runtime_error("short read");
    }
    gpufile::driver_close();
    if (got != std::vector<unsigned char>(expected, expected + size)) throw std::runtime_error("wrong bytes");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpufile_unload_read: %s\n", e.what());
    return 1;
  }
}
