// Helpers of the C++ API tests (cpp_tests). The tests use only the public API
// (<gpufile/gpufile.hpp>, linked from libgpufile.so) and get memory of each kind from the CUDA
// driver test double through its stand-in cuda_runtime.h, as an application would from CUDA.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gpufile/gpufile.hpp>

#include "splitmix64.hpp"

namespace cpp_test {

enum class Mem { pageable, pinned, device };
const char* mem_name(Mem m);
inline void PrintTo(Mem m, std::ostream* os) { *os << mem_name(m); }
inline const Mem kAllMem[] = {Mem::pageable, Mem::pinned, Mem::device};

// `size` bytes of one kind of memory, filled with `fill`.
class Memory {
 public:
  Memory(Mem kind, std::size_t size, std::uint8_t fill = 0xee);
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* get() const { return ptr_; }
  char* at(std::size_t offset) const { return static_cast<char*>(ptr_) + offset; }
  std::size_t size() const { return size_; }
  std::vector<std::uint8_t> to_host() const;
  void from_host(const std::vector<std::uint8_t>& bytes);

 private:
  Mem kind_;
  std::size_t size_;
  void* ptr_ = nullptr;
};

// A fresh directory, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed);
void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> read_file(const std::string& path);
// "" when equal, else where they first differ.
std::string mismatch(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want);
std::vector<std::uint8_t> slice(const std::vector<std::uint8_t>& v, std::size_t at,
                                std::size_t n);

// Every test starts and ends with the driver closed and statistics off (their defaults), so
// settings staged by one test never reach another.
class CppApiTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  TempDir dir_;
};

// `statement` throws a gpufile::Exception whose code is (or, for a std::errc, matches)
// `expected_code`.
#define EXPECT_GPUFILE_ERROR(statement, expected_code)                                \
  do {                                                                                \
    try {                                                                             \
      statement;                                                                      \
      ADD_FAILURE() << #statement " threw nothing";                                   \
    } catch (const gpufile::Exception& e) {                                           \
      EXPECT_TRUE(e.code() == (expected_code)) << e.what();                           \
    }                                                                                 \
  } while (0)

}  // namespace cpp_test
