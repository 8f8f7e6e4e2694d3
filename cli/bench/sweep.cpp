#include "cli/bench/sweep.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

namespace gpufile::cli::benchmark {
namespace {

// Next to the target, so the rename stays within one file system.
std::string temp_path_for(const std::string& path) {
  return path + ".tmp." + std::to_string(getpid());
}

std::string file_error(const std::string& flag, const std::string& path, int err) {
  return "gpufile bench: cannot write " + flag + " " + path + ": " + std::strerror(err);
}

// Creates and removes the temporary file write_atomically() will use.
bool writable(const std::string& flag, const std::string& path) {
  struct stat st{};
  int err = 0;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    err = EISDIR;
  } else {
    const std::string tmp = temp_path_for(path);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return true;
    }
    err = errno;
  }
  std::fprintf(stderr, "%s\n", file_error(flag, path, err).c_str());
  return false;
}

// A temporary file then a rename: readers never see half a file, and a failed write leaves
// whatever was at `path` before.
bool write_atomically(const std::string& flag, const std::string& path, const void* data,
                      size_t n) {
  const std::string tmp = temp_path_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = fd < 0 ? errno : 0;
  for (size_t done = 0; err == 0 && done < n;) {
    ssize_t w = ::write(fd, static_cast<const char*>(data) + done, n - done);
    if (w < 0 && errno != EINTR) err = errno;
    if (w > 0) done += static_cast<size_t>(w);
  }
  if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err == 0) return true;
  ::unlink(tmp.c_str());
  std::fprintf(stderr, "%s\n", file_error(flag, path, err).c_str());
  return false;
}

// The -i of each point: the sweep's sizes, else -i as given (a single size or a range).
std::vector<IoSizes> io_points(const Options& o) {
  if (o.sweep_io.empty()) return {io_sizes_of(o)};
  std::vector<IoSizes> sizes;
  for (uint64_t io : o.sweep_io) sizes.push_back(IoSizes{io, io, 0});
  return sizes;
}

}  // namespace

std::vector<Options> sweep_points(const Options& o) {
  const std::vector<int> threads = o.sweep_threads.empty() ? std::vector<int>{o.threads}
                                                           : o.sweep_threads;
  const std::vector<IoSizes> sizes = io_points(o);
  std::vector<Options> points;
  for (int t : threads)
    for (const IoSizes& io : sizes) {
      points.push_back(o);
      points.back().threads = t;
      set_io_sizes(&points.back(), io);
    }
  return points;
}

bool outputs_writable(const Options& o) {
  return o.csv_path.empty() || writable("--csv", o.csv_path);
}

bool write_outputs(const Options& o, const std::vector<Result>& results) {
  if (!o.csv_path.empty()) {
    std::string csv = csv_header();
    for (const Result& r : results) csv += csv_row(r);
    if (!write_atomically("--csv", o.csv_path, csv.data(), csv.size())) return false;
  }
  return true;
}

}  // namespace gpufile::cli::benchmark
