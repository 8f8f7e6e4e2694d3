// The IO sizes of a run: `-i SIZE`, or gdsio's `-i MIN:MAX:STEP` (spec §6.1: "a range varies
// the IO size"; the job file key `bs` takes the same forms).
//
// What NVIDIA documents of a range, and all of it: gdsio's help lists
// "-i <io_size(K|M|G)> <min_size:max_size:step_size>", and the sample job file in the GPUDirect
// Storage Benchmarking and Configuration Guide (docs.nvidia.com/gpudirect-storage/
// configuration-guide, NAS section) says of `bs`: "for variable block size can specify range
// e.g. bs=1M:4M:1M, (1M : start block size, 4M : end block size, 1M : steps in which size is
// varied)". A run with a range still prints one result line. Whether gdsio draws each IO's
// size at random or walks the series in order is not documented; we draw every IO's size
// uniformly from MIN, MIN+STEP, ..., MAX (docs/bench.md says so), with a generator seeded by
// -k and the lane, so that a read with the same -i, -k, -w, -s and -o cuts the file into the
// same blocks as the -V write that made it.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace gpufile::cli::benchmark {

struct IoSizes {
  uint64_t min = 0;
  uint64_t max = 0;
  uint64_t step = 0;  // 0: every IO has `max` bytes

  bool varies() const { return step != 0 && max > min; }
  uint64_t choices() const { return varies() ? (max - min) / step + 1 : 1; }
  // Every size is a multiple of this (gcd of MIN and STEP; the size itself when fixed).
  uint64_t granule() const;
  // One IO's size: MIN + k*STEP for a uniform k (always `max` when the size is fixed).
  uint64_t draw(std::mt19937_64& rng) const;
  // "65536" or "4096:65536:4096", for messages.
  std::string describe() const;
};

// "1M" or "4K:1M:4K" (each size as parse_size takes it: binary K/M/G). A range needs
// 0 < MIN <= MAX, STEP > 0, and MAX reachable from MIN in whole steps. False with the reason.
bool parse_io_sizes(const std::string& text, IoSizes* out, std::string* why);

// Why a run cannot use these sizes, or empty. Files opened with O_DIRECT (`direct`) need a
// range in whole 4 KiB units, so that every IO after the first one still starts aligned; -V
// (`verify`) needs every IO to hold the 64-byte block header.
std::string io_sizes_problem(const IoSizes& s, bool direct, bool verify);

}  // namespace gpufile::cli::benchmark
