// libgpufile.so unloaded with dlclose after a remote read: the remote pool's threads end and
// are joined first (its static destructor), so none is left running code that is gone. Loads
// the plugin unload_user.cpp (which links libgpufile.so; this program does not), reads an
// object from an HTTP server here through it, unloads it, then checks that libgpufile.so left
// the address space and no thread named gpufile-remote is left.
//   usage: cpp_unload PLUGIN      exit status 0 when all holds, else 1 saying what did not
#include <dirent.h>
#include <dlfcn.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "object_server.hpp"
#include "splitmix64.hpp"

namespace {

int threads_named(const std::string& name) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  closedir(d);
  return n;
}

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

int fail(const std::string& why) {
  std::cerr << "cpp_unload: " << why << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: cpp_unload PLUGIN");
  std::vector<std::uint8_t> bytes((1 << 20) + 3);
  test_support::SplitMix64(77).fill(bytes.data(), bytes.size());
  cpp_test::ObjectServer server(bytes);

  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) return fail(std::string("dlopen: ") + dlerror());
  using Read = int (*)(const char*, const unsigned char*, unsigned long);
  auto read = reinterpret_cast<Read>(dlsym(plugin, "gpufile_unload_read"));
  if (read == nullptr) return fail("no gpufile_unload_read in the plugin");
  if (read(server.url("/object").c_str(), bytes.data(), bytes.size()) != 0) return fail("the read failed");
  const int before = threads_named("gpufile-remote");
  if (before <= 0) return fail("no remote pool thread after the read: nothing to check");
  if (!mapped("libgpufile.so")) return fail("libgpufile.so is not mapped after the read");

  if (dlclose(plugin) != 0) return fail(std::string("dlclose: ") + dlerror());
  if (mapped("libgpufile.so")) return fail("libgpufile.so is still mapped after dlclose");
  // Joined threads leave /proc/self/task at once, or very nearly.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int left = threads_named("gpufile-remote");
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    left = threads_named("gpufile-remote");
  }
  if (left != 0)
    return fail(std::to_string(left) + " of " + std::to_string(before) +
                " remote pool threads outlived libgpufile.so");
  std::cout << "cpp_unload: " << before << " remote pool threads ended at dlclose\n";
  return 0;
}
