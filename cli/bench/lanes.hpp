// Lanes: the data set cut into the units that run side by side. One lane per thread (-w), or
// one per batch slot with -x 6 and 7. A lane owns a byte range of one file and walks it block
// by block (IO size), in order or shuffled.
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

  void plan(uint64_t begin, uint64_t end, uint64_t io, bool random, uint64_t seed);
  // The next block; after the last one of a pass, starts over (reshuffled) and says so in
  // `wrapped` so one-pass runs can stop there.
  Block next(bool* wrapped);
  bool pass_done() const { return cursor_ == order_.size(); }

 private:
  std::vector<uint64_t> order_;
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
// Whether the data set can be cut that way (with -V, no IO too small for its header); false
// with a message. plan_lanes() checks it too; sweeps check every point before running any.
bool lanes_fit(const Options& o);
bool plan_lanes(const Options& o, IoType type, std::vector<Lane>* lanes);

// "offset N of PATH", for messages.
std::string at(const Lane& lane, const Block& b);

}  // namespace gpufile::cli::benchmark
