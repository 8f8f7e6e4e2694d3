// The tests' random source: splitmix64, fast enough to fill hundreds of MiB, and the same
// sequence everywhere for a seed (the simulation's seeds, the soak's and the integration tests'
// replay exactly). Suites add the draws they need on top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace test_support {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // A number in [0, n); 0 when n is 0.
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  // n bytes, eight from each draw (the last draw's first bytes for a tail).
  void fill(void* p, size_t n) {
    auto* out = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t v = next();
      std::memcpy(out + i, &v, n - i < 8 ? n - i : 8);
    }
  }

 private:
  uint64_t s_;
};

}  // namespace test_support
