#include "cli/bench/lanes.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "cli/bench/blocks.hpp"

namespace gpufile::cli::benchmark {

void Lane::plan(uint64_t begin, uint64_t end, uint64_t io, bool random, uint64_t seed) {
  end_ = end;
  random_ = random;
  rng_.seed(seed);
  for (uint64_t off = begin; off < end; off += io) order_.push_back(off);
  io_ = io;
  if (random_) std::shuffle(order_.begin(), order_.end(), rng_);
}

Block Lane::next(bool* wrapped) {
  *wrapped = false;
  if (cursor_ == order_.size()) {
    cursor_ = 0;
    *wrapped = true;
    if (random_) std::shuffle(order_.begin(), order_.end(), rng_);
  }
  uint64_t off = order_[cursor_++];
  return Block{off, std::min(io_, end_ - off)};
}

bool open_lane(Lane* lane, bool writing, bool buffered, bool want_handle) {
  int flags = (writing ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC | (buffered ? 0 : O_DIRECT);
  lane->fd = ::open(lane->path.c_str(), flags, 0644);
  if (lane->fd < 0 && errno == EINVAL && !buffered) {  // a file system without O_DIRECT
    static bool told = false;
    if (!std::exchange(told, true))
      std::fprintf(stderr, "gpufile bench: %s: no O_DIRECT here; using the page cache\n",
                   lane->path.c_str());
    lane->fd = ::open(lane->path.c_str(), flags & ~O_DIRECT, 0644);
  }
  if (lane->fd < 0) {
    std::fprintf(stderr, "gpufile bench: %s: %s%s\n", lane->path.c_str(), std::strerror(errno),
                 writing ? "" : " (run a write pass first)");
    return false;
  }
  if (!want_handle) return true;
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = lane->fd;
  CUfileError_t e = cuFileHandleRegister(&lane->handle, &d);
  if (e.err == CU_FILE_SUCCESS) return true;
  std::fprintf(stderr, "gpufile bench: cuFileHandleRegister(%s): %s\n", lane->path.c_str(),
               CUFILE_ERRSTR(e.err));
  return false;
}

void close_lane(Lane* lane) {
  if (lane->handle) cuFileHandleDeregister(lane->handle);
  if (lane->fd >= 0) ::close(lane->fd);
  lane->handle = nullptr;
  lane->fd = -1;
}

namespace {

// -f: an equal slice per thread, in whole IOs; -D: the whole -s.
uint64_t slice_of(const Options& o) {
  return o.file.empty() ? o.size : o.size / o.threads / o.io_size * o.io_size;
}

}  // namespace

bool lanes_fit(const Options& o) {
  const uint64_t slice = slice_of(o);
  if (slice == 0) {
    std::fprintf(stderr, "gpufile bench: -s %llu is too small for %d threads of -i %llu\n",
                 static_cast<unsigned long long>(o.size), o.threads,
                 static_cast<unsigned long long>(o.io_size));
    return false;
  }
  // The last IO of a slice is short when the IO size does not divide it (the last -f slice
  // takes the remainder of the file).
  const uint64_t last = o.file.empty() ? slice : o.size - slice * (o.threads - 1);
  const uint64_t tail = last % o.io_size;
  if (o.verify && tail != 0 && tail < sizeof(BlockHeader)) {
    std::fprintf(stderr, "gpufile bench: -V needs every IO to hold at least %zu bytes; "
                         "the last one of a slice would hold %llu\n",
                 sizeof(BlockHeader), static_cast<unsigned long long>(tail));
    return false;
  }
  return true;
}

bool plan_lanes(const Options& o, IoType type, std::vector<Lane>* lanes) {
  if (!lanes_fit(o)) return false;
  const int n = o.threads;
  const uint64_t slice = slice_of(o);
  const bool shared = !o.file.empty();
  *lanes = std::vector<Lane>(n);
  for (int t = 0; t < n; ++t) {
    Lane& l = (*lanes)[t];
    l.path = shared ? o.file : o.dir + "/gdsio." + std::to_string(t);
    uint64_t begin = o.offset + (shared ? slice * t : 0);
    uint64_t end = shared && t == n - 1 ? o.offset + o.size : begin + slice;
    l.plan(begin, end, o.io_size, is_random(type), o.seed * 1000003 + t);
  }
  return true;
}

std::string at(const Lane& lane, const Block& b) {
  return "offset " + std::to_string(b.offset) + " of " + lane.path;
}

}  // namespace gpufile::cli::benchmark
