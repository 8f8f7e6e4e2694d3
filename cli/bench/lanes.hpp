// Lanes: the data set cut into the units that run side by side. One lane per thread (-w), or
// one per batch slot with -x 6 and 7. A lane owns a byte range of one file and walks it block
// by block, in order or shuffled. Blocks are -i bytes, or with -i MIN:MAX:STEP each of a size
// drawn when the lane is planned (io_sizes.hpp), so every pass and every read-back of the same
// options meets the same blocks.
#pragma once

#include <cufile.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cli/bench/options.hpp"

namespace gpufile::cli::benchmark {

struct Block {
  uint64_t offset = 0;
  uint64_t length = 0;
};

class Lane {
 public:
  std::string path;
  int fd = -1;
  CUfileHandle_t handle = nullptr;

  // Cuts [begin, end) into blocks; `seed` drives both the sizes (of a range) and the shuffle.
  void plan(uint64_t begin, uint64_t end, const IoSizes& sizes, bool random, uint64_t seed);
  // The next block; after the last one of a pass, starts over (reshuffled) and says so in
  // `wrapped` so one-pass runs can stop there.
  Block next(bool* wrapped);
  bool pass_done() const { return cursor_ == order_.size(); }

 private:
  uint64_t length_at(uint64_t offset) const;

  std::vector<uint64_t> order_;  // block offsets in the order of a pass
  std::vector<uint64_t> starts_;  // with a range only: block offsets, ascending
  size_t cursor_ = 0;
  uint64_t end_ = 0;
  uint64_t io_ = 0;
  bool random_ = false;
  std::mt19937_64 rng_;
};

// Opens the lane's file (and registers a cuFile handle when `want_handle`); false with a
// message on failure.
bool open_lane(Lane* lane, bool writing, bool buffered, bool want_handle);
void close_lane(Lane* lane);

// -f: the threads split the file; the last one also takes what does not divide evenly.
// -D: every lane has a whole file of -s bytes.
// With a range the slices are whole multiples of the sizes' granule instead of whole IOs.
// Whether the data set can be cut that way (with -V, no IO too small for its header); false
// with a message. plan_lanes() checks it too; sweeps check every point before running any.
bool lanes_fit(const Options& o);
bool plan_lanes(const Options& o, IoType type, std::vector<Lane>* lanes);

// "offset N of PATH", for messages.
std::string at(const Lane& lane, const Block& b);

}  // namespace gpufile::cli::benchmark
