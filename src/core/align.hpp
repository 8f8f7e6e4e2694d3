// Alignment arithmetic. Alignments are powers of two (the kernel guarantees it for DIO).
#pragma once

#include <cstdint>

namespace gpufile {

constexpr uint64_t align_down(uint64_t v, uint64_t a) { return v & ~(a - 1); }
constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
constexpr bool is_aligned(uint64_t v, uint64_t a) { return (v & (a - 1)) == 0; }
constexpr bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// [begin, end) of a file range, split at the alignment grid into an unaligned head, an aligned
// body and an unaligned tail. Any part may be empty; a range inside one block is all head.
struct AlignedSplit {
  uint64_t head_end;   // head = [begin, head_end)
  uint64_t body_end;   // body = [head_end, body_end), aligned at both ends
  // tail = [body_end, end)
};

constexpr AlignedSplit split_aligned(uint64_t begin, uint64_t end, uint64_t a) {
  uint64_t body_begin = align_up(begin, a);
  uint64_t body_end = align_down(end, a);
  if (body_begin >= body_end) return {end, end};  // no whole block inside: all head
  return {body_begin, body_end};
}

}  // namespace gpufile
