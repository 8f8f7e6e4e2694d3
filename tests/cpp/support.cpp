#include "support.hpp"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "default_config.hpp"

namespace cpp_test {

namespace {

[[maybe_unused]] auto* const kDefaultConfig =
    ::testing::AddGlobalTestEnvironment(new test_support::DefaultConfig("cpp"));

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

const char* mem_name(Mem m) {
  switch (m) {
    case Mem::pageable: return "pageable";
    case Mem::pinned: return "pinned";
    case Mem::device: return "device";
  }
  return "?";
}

Memory::Memory(Mem kind, std::size_t size, std::uint8_t fill) : kind_(kind), size_(size) {
  switch (kind) {
    case Mem::pageable: ptr_ = std::malloc(size); break;
    case Mem::pinned: check(cudaMallocHost(&ptr_, size), "cudaMallocHost"); break;
    case Mem::device: check(cudaMalloc(&ptr_, size), "cudaMalloc"); break;
  }
  if (ptr_ == nullptr) throw std::bad_alloc();
  from_host(std::vector<std::uint8_t>(size, fill));
}

Memory::~Memory() {
  switch (kind_) {
    case Mem::pageable: std::free(ptr_); break;
    case Mem::pinned: cudaFreeHost(ptr_); break;
    case Mem::device: cudaFree(ptr_); break;
  }
}

std::vector<std::uint8_t> Memory::to_host() const {
  std::vector<std::uint8_t> out(size_);
  check(cudaMemcpy(out.data(), ptr_, size_, cudaMemcpyDefault), "cudaMemcpy");
  return out;
}

void Memory::from_host(const std::vector<std::uint8_t>& bytes) {
  check(cudaMemcpy(ptr_, bytes.data(), bytes.size(), cudaMemcpyDefault), "cudaMemcpy");
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/gpufile-cpp-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  test_support::SplitMix64 rng(seed);
  std::vector<std::uint8_t> v(n);
  rng.fill(v.data(), n);
  return v;
}

void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string mismatch(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      std::ostringstream s;
      s << "byte " << i << " is " << int(got[i]) << ", expected " << int(want[i]);
      return s.str();
    }
  }
  return "";
}

std::vector<std::uint8_t> slice(const std::vector<std::uint8_t>& v, std::size_t at,
                                std::size_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(at),
          v.begin() + static_cast<std::ptrdiff_t>(at + n)};
}

void CppApiTest::SetUp() {
  while (gpufile::is_driver_open()) gpufile::driver_close();
}

void CppApiTest::TearDown() {
  while (gpufile::is_driver_open()) gpufile::driver_close();
}

}  // namespace cpp_test
