#include "cli/bench/lanes.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/bench/blocks.hpp"

namespace gpufile::cli::benchmark {

void Lane::plan(uint64_t begin, uint64_t end, const IoSizes& sizes, bool random, uint64_t seed) {
  end_ = end;
  io_ = sizes.max;
  random_ = random;
  rng_.seed(seed);
  // The sizes come from a generator of their own: the layout must not depend on whether the
  // pass is shuffled, or a random read-back would not meet the blocks a sequential write left.
  std::mt19937_64 size_rng(mix(seed ^ 0x51a3e5));
  for (uint64_t off = begin; off < end; off += sizes.draw(size_rng)) order_.push_back(off);
  if (sizes.varies()) starts_ = order_;
  if (random_) std::shuffle(order_.begin(), order_.end(), rng_);
}

// A block ends where the next one starts (or at the end of the lane, or after -i bytes).
uint64_t Lane::length_at(uint64_t offset) const {
  if (starts_.empty()) return std::min(io_, end_ - offset);
  auto next = std::upper_bound(starts_.begin(), starts_.end(), offset);
  return (next == starts_.end() ? end_ : *next) - offset;
}

Block Lane::next(bool* wrapped) {
  *wrapped = false;
  if (cursor_ == order_.size()) {
    cursor_ = 0;
    *wrapped = true;
    if (random_) std::shuffle(order_.begin(), order_.end(), rng_);
  }
  uint64_t off = order_[cursor_++];
  return Block{off, length_at(off)};
}

bool open_lane(Lane* lane, bool writing, bool buffered, bool want_handle) {
  int flags = (writing ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC | (buffered ? 0 : O_DIRECT);
  lane->fd = ::open(lane->path.c_str(), flags, 0644);
  if (lane->fd < 0 && errno == EINVAL && !buffered) {  // a file system without O_DIRECT
    static std::atomic<bool> told{false};  // the jobs of a job file open lanes at once
    if (!told.exchange(true))
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

// -f: an equal slice per thread, in whole IOs (whole granules of a range); -D: the whole -s.
uint64_t slice_of(const Options& o) {
  const uint64_t unit = io_sizes_of(o).granule();
  return o.file.empty() ? o.size : o.size / o.threads / unit * unit;
}

// The shortest last IO a lane of `len` bytes may end with; 0 when none is cut short. With a
// range, the last block is cut wherever the drawn sizes overshoot the end: its length is `len`
// modulo the granule, or any whole number of granules.
uint64_t shortest_tail(uint64_t len, const IoSizes& sizes) {
  if (!sizes.varies()) return len % sizes.max;
  const uint64_t rest = len % sizes.granule();
  return rest != 0 ? rest : sizes.granule();
}

}  // namespace

bool lanes_fit(const Options& o) {
  const IoSizes sizes = io_sizes_of(o);
  const std::string problem = io_sizes_problem(sizes, opens_direct(o), o.verify);
  if (!problem.empty()) return std::fprintf(stderr, "gpufile bench: %s\n", problem.c_str()), false;
  const uint64_t slice = slice_of(o);
  if (slice == 0) {
    std::fprintf(stderr, "gpufile bench: -s %llu is too small for %d threads of -i %s\n",
                 static_cast<unsigned long long>(o.size), o.threads, sizes.describe().c_str());
    return false;
  }
  // The last -f slice takes the remainder of the file.
  const uint64_t last = o.file.empty() ? slice : o.size - slice * (o.threads - 1);
  uint64_t shortest = 0;
  for (uint64_t len : {slice, last}) {
    const uint64_t tail = shortest_tail(len, sizes);
    if (tail != 0 && (shortest == 0 || tail < shortest)) shortest = tail;
  }
  if (o.verify && shortest != 0 && shortest < sizeof(BlockHeader)) {
    std::fprintf(stderr, "gpufile bench: -V needs every IO to hold at least %zu bytes; "
                         "the last one of a slice could hold %llu\n",
                 sizeof(BlockHeader), static_cast<unsigned long long>(shortest));
    return false;
  }
  return true;
}

bool plan_lanes(const Options& o, IoType type, std::vector<Lane>* lanes) {
  if (!lanes_fit(o)) return false;
  const int n = o.threads;
  const uint64_t slice = slice_of(o);
  const IoSizes sizes = io_sizes_of(o);
  const bool shared = !o.file.empty();
  *lanes = std::vector<Lane>(n);
  for (int t = 0; t < n; ++t) {
    Lane& l = (*lanes)[t];
    l.path = shared ? o.file : o.dir + "/gdsio." + std::to_string(t);
    uint64_t begin = o.offset + (shared ? slice * t : 0);
    uint64_t end = shared && t == n - 1 ? o.offset + o.size : begin + slice;
    l.plan(begin, end, sizes, is_random(type), o.seed * 1000003 + t);
  }
  return true;
}

std::string at(const Lane& lane, const Block& b) {
  return "offset " + std::to_string(b.offset) + " of " + lane.path;
}

}  // namespace gpufile::cli::benchmark
