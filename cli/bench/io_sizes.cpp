#include "cli/bench/io_sizes.hpp"

#include <numeric>
#include <vector>

#include "cli/bench/blocks.hpp"
#include "cli/commands.hpp"

namespace gpufile::cli::benchmark {
namespace {

constexpr uint64_t kDirectUnit = 4096;

std::vector<std::string> split_colons(const std::string& text) {
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    const size_t colon = text.find(':', from);
    parts.push_back(text.substr(from, colon - from));
    if (colon == std::string::npos) return parts;
    from = colon + 1;
  }
}

bool parse_one(const std::string& text, const char* what, uint64_t* out, std::string* why) {
  unsigned long long v = 0;
  if (!text.empty() && parse_size(text.c_str(), &v) && v > 0) return *out = v, true;
  *why = std::string(what) + " '" + text + "' is not a size > 0";
  return false;
}

}  // namespace

uint64_t IoSizes::granule() const { return varies() ? std::gcd(min, step) : max; }

uint64_t IoSizes::draw(std::mt19937_64& rng) const {
  // A plain modulo rather than std::uniform_int_distribution: the layout of a -V file must be
  // the same wherever it is read back, and the standard leaves the distribution's algorithm
  // to the library. The bias of rng() % n for n far below 2^64 is immaterial here.
  return varies() ? min + (rng() % choices()) * step : max;
}

std::string IoSizes::describe() const {
  if (!varies()) return std::to_string(max);
  return std::to_string(min) + ":" + std::to_string(max) + ":" + std::to_string(step);
}

bool parse_io_sizes(const std::string& text, IoSizes* out, std::string* why) {
  const std::vector<std::string> parts = split_colons(text);
  IoSizes s;
  if (parts.size() == 1) {
    if (!parse_one(parts[0], "IO size", &s.max, why)) return false;
    s.min = s.max;
    return *out = s, true;
  }
  if (parts.size() != 3) {
    *why = "a range is MIN:MAX:STEP (three sizes), e.g. 4K:1M:4K";
    return false;
  }
  if (!parse_one(parts[0], "MIN", &s.min, why) || !parse_one(parts[1], "MAX", &s.max, why) ||
      !parse_one(parts[2], "STEP", &s.step, why))
    return false;
  if (s.min > s.max) {
    *why = "MIN (" + parts[0] + ") is larger than MAX (" + parts[1] + ")";
    return false;
  }
  if ((s.max - s.min) % s.step != 0) {
    *why = "MAX (" + parts[1] + ") is not MIN (" + parts[0] + ") plus whole steps of " + parts[2];
    return false;
  }
  return *out = s, true;
}

std::string io_sizes_problem(const IoSizes& s, bool direct, bool verify) {
  if (direct && s.varies() && s.granule() % kDirectUnit != 0)
    return "IO sizes " + s.describe() +
           ": with O_DIRECT (the default) MIN and STEP must be multiples of 4 KiB, so that "
           "every IO starts aligned; through the page cache (-O 1, -x 4) any sizes go";
  if (verify && s.min < sizeof(BlockHeader))
    return "-V needs every IO to hold at least " + std::to_string(sizeof(BlockHeader)) +
           " bytes (its block header); IO sizes " + s.describe() + " allow " +
           std::to_string(s.min);
  return {};
}

}  // namespace gpufile::cli::benchmark
