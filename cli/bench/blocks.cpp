#include "cli/bench/blocks.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace gpufile::cli::benchmark {
namespace {

constexpr uint64_t kBlockMagic = 0x6770756662656e63ull;  // "gpufbenc"
constexpr size_t kChecksumAt = offsetof(BlockHeader, checksum);

uint64_t hash_bytes(uint64_t h, const char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ull;
  return h;
}

// Everything but the checksum field itself.
uint64_t block_checksum(const char* block, size_t len) {
  uint64_t h = hash_bytes(0xcbf29ce484222325ull, block, kChecksumAt);
  return hash_bytes(h, block + kChecksumAt + 8, len - kChecksumAt - 8);
}

}  // namespace

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill_block(char* block, size_t len, uint64_t offset, uint64_t seed) {
  for (size_t i = sizeof(BlockHeader); i < len; i += 8) {
    uint64_t w = mix(seed ^ mix(offset + i));
    std::memcpy(block + i, &w, std::min<size_t>(8, len - i));
  }
  BlockHeader h{kBlockMagic, offset, seed, len, 0, {0, 0, 0}};
  std::memcpy(block, &h, sizeof h);
  h.checksum = block_checksum(block, len);
  std::memcpy(block + kChecksumAt, &h.checksum, 8);
}

std::string check_block(const char* block, size_t len, uint64_t offset, uint64_t seed) {
  BlockHeader h;
  std::memcpy(&h, block, sizeof h);
  char why[160];
  if (h.magic != kBlockMagic)
    return "no verification header (not written with -V, or overwritten)";
  if (h.checksum != block_checksum(block, len)) return "checksum mismatch (corrupt data)";
  if (h.offset != offset)
    return std::snprintf(why, sizeof why, "block belongs at offset %llu (misplaced data)",
                         static_cast<unsigned long long>(h.offset)), why;
  if (h.seed != seed)
    return std::snprintf(why, sizeof why, "written with seed %llu, expected %llu (stale data)",
                         static_cast<unsigned long long>(h.seed),
                         static_cast<unsigned long long>(seed)), why;
  if (h.length != len)
    return std::snprintf(why, sizeof why, "written with IO size %llu, reading with %zu",
                         static_cast<unsigned long long>(h.length), len), why;
  return {};
}

}  // namespace gpufile::cli::benchmark
