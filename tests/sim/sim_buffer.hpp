// A simulated caller's buffer: memory of one kind (device, managed, pinned or pageable), with
// guard zones before and after it in the same allocation, and a mirror: what every byte of the
// allocation must hold as far as the caller knows. Any byte that differs from the mirror was
// written by the library where it had no right to (outside an operation's range, or after the
// call returned).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sim {

enum class MemKind { device, managed, pinned, pageable };
const char* mem_name(MemKind k);

class SimBuffer {
 public:
  static constexpr size_t kGuard = 4096;

  // `misalign`: how far past a page boundary the usable bytes start. "" in *why on success.
  SimBuffer(MemKind kind, size_t size, size_t misalign, uint64_t fill_seed, std::string* why);
  ~SimBuffer();
  SimBuffer(const SimBuffer&) = delete;
  SimBuffer& operator=(const SimBuffer&) = delete;

  MemKind kind() const { return kind_; }
  size_t size() const { return size_; }
  // What the cuFile calls get: the first usable byte.
  void* base() const { return reinterpret_cast<void*>(addr_ + kGuard + misalign_); }

  // Sets bytes [off, off+n) of the usable part (and the mirror) to `src`.
  void put(size_t off, const void* src, size_t n);
  // The bytes of the usable part now, read from the memory (not the mirror).
  std::vector<uint8_t> get(size_t off, size_t n) const;
  const uint8_t* mirror(size_t off) const { return mirror_.data() + kGuard + misalign_ + off; }
  // The caller accepts whatever the memory holds now in [off, off+n) (after a failed read).
  void accept(size_t off, const std::vector<uint8_t>& now);
  // Compares the allocation with the mirror from usable offset `from` (may be negative: the
  // guard before) over `n` bytes, clipped to the allocation. "" or what differs.
  std::string check(int64_t from, size_t n) const;
  std::string check_all() const { return check(-static_cast<int64_t>(kGuard + misalign_), total_); }

 private:
  void copy_out(size_t at, void* dst, size_t n) const;  // `at` from the allocation's start
  void copy_in(size_t at, const void* src, size_t n);

  MemKind kind_;
  size_t size_, misalign_, total_;
  uint64_t addr_ = 0;  // the allocation (a device address for device and managed memory)
  std::vector<uint8_t> mirror_;
};

}  // namespace sim
