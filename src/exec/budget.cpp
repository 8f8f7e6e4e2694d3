#include "exec/budget.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>

namespace gpufile::exec {
namespace {

// The first of `names` that is set to a number in [lo, hi], or `none`.
long first_number(const char* (*getenv)(const char*), std::initializer_list<const char*> names,
                  long lo, long hi, long none) {
  for (const char* name : names) {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') continue;
    long n = 0;
    auto [end, ec] = std::from_chars(v, v + std::strlen(v), n);
    if (ec == std::errc() && *end == '\0' && n >= lo && n <= hi) return n;
  }
  return none;
}

constexpr long kMostProcesses = 1 << 16;

}  // namespace

unsigned local_world_size(const char* (*getenv)(const char*)) {
  return static_cast<unsigned>(first_number(
      getenv, {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1,
      kMostProcesses, 1));
}

int local_rank(const char* (*getenv)(const char*)) {
  return static_cast<int>(first_number(
      getenv, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0, kMostProcesses, -1));
}

Budget automatic_budget(unsigned cores, unsigned local_world) {
  const bool alone = local_world <= 1;
  Budget b;
  b.cores = std::max(1u, cores / std::max(1u, local_world));
  b.workers = std::clamp(b.cores * 3 / 4, alone ? 4u : 2u, 16u);
  b.caller_slabs = std::max(alone ? 8u : 4u, 2 * b.cores);
  b.small_buffers = std::max(alone ? 64u : 16u, 4 * b.cores);
  return b;
}

uint64_t pagecache_dma_budget(uint64_t per_gpu, unsigned devices, unsigned local_world,
                              uint64_t memory) {
  const uint64_t gpus = std::max(1u, devices / std::max(1u, local_world));
  return std::min(per_gpu * gpus, memory / 8);
}

uint64_t shared_piece_bytes(uint64_t setting, uint64_t last_level_cache, unsigned processes,
                            unsigned workers, unsigned slabs_per_worker, uint64_t slab) {
  constexpr uint64_t kSmallest = 256 << 10;
  if (processes == 0) return 0;
  uint64_t piece = setting;
  if (piece == 0) {
    const uint64_t in_flight = uint64_t{processes} * std::max(1u, workers) * std::max(1u, slabs_per_worker);
    const uint64_t room = last_level_cache / 3 / in_flight;
    if (room == 0) return 0;  // unknown (or tiny) cache: as before
    piece = std::max(kSmallest, std::bit_floor(room));
  }
  return piece < slab ? piece : 0;
}

}  // namespace gpufile::exec
