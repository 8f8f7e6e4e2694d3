// Self-checking blocks for -V. Every block starts with a header saying where it belongs and
// which run wrote it; the checksum covers the header and the payload, so a flipped byte, a
// block landing at the wrong offset, or a block left over from another run is each caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpufile::cli::benchmark {

struct BlockHeader {
  uint64_t magic;
  uint64_t offset;  // file offset the block was written to
  uint64_t seed;    // -k of the writing run
  uint64_t length;
  uint64_t checksum;
  uint64_t reserved[3];
};
static_assert(sizeof(BlockHeader) == 64);

// A well-mixed 64-bit value of x (splitmix64's finaliser): the payload of -V blocks, and the
// noise that writes carry without -V.
uint64_t mix(uint64_t x);

// The block a -V write of `len` bytes at file `offset` with seed `seed` puts into the file.
void fill_block(char* block, size_t len, uint64_t offset, uint64_t seed);

// Empty when the block is what a -V write of (offset, seed, len) left; else what is wrong.
std::string check_block(const char* block, size_t len, uint64_t offset, uint64_t seed);

}  // namespace gpufile::cli::benchmark
