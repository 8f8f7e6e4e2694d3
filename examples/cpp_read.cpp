// cpp_read: gpufile's C++ API in one page.
//
//   cpp_read FILE
//
// Reads FILE into GPU memory four ways (one blocking read, two futures, one batch of four
// pieces, one read ordered on a CUDA stream), copies each result back and compares it with an
// ordinary read of the file, then prints the bytes per data path. Without a GPU it does the
// first three into host memory. Exits 0 when every byte matches.
//
// Builds against libgpufile.so with CUDA's runtime API:
//   g++ -std=c++20 cpp_read.cpp $(pkg-config --cflags --libs gpufile) -lcudart
// (CMake: find_package(gpufile CONFIG) and target_link_libraries(... gpufile::gpufile)).
// In gpufile's own build it links the CUDA driver test double and its stand-in cuda_runtime.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <vector>

#include <gpufile/gpufile.hpp>

namespace {

// GPU memory when there is a GPU, else host memory: gpufile reads into either.
class Memory {
 public:
  explicit Memory(std::size_t size) : size_(size) {
    if (cudaMalloc(&ptr_, size) == cudaSuccess) {
      on_gpu_ = true;
    } else {
      host_.resize(size);
      ptr_ = host_.data();
    }
  }
  ~Memory() {
    if (on_gpu_) cudaFree(ptr_);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* get() const { return ptr_; }
  bool on_gpu() const { return on_gpu_; }
  std::vector<char> to_host() const {
    if (!on_gpu_) return host_;
    std::vector<char> out(size_);
    if (cudaMemcpy(out.data(), ptr_, size_, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy failed");
    return out;
  }

 private:
  std::size_t size_;
  void* ptr_ = nullptr;
  bool on_gpu_ = false;
  std::vector<char> host_;
};

std::vector<char> read_plainly(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool same(const char* what, const Memory& got, const std::vector<char>& want) {
  const bool ok = got.to_host() == want;
  std::printf("cpp_read: %-8s %s\n", what, ok ? "every byte matches" : "MISMATCH");
  return ok;
}

int run(const char* path) {
  const std::vector<char> want = read_plainly(path);
  gpufile::File file(path, "r");  // opened and registered; closed when it goes out of scope
  const std::size_t size = file.size();
  Memory memory(size);
  std::printf("cpp_read: %zu bytes into %s memory (engine %s)\n", size,
              memory.on_gpu() ? "GPU" : "host", gpufile::io_engine().c_str());
  bool ok = true;

  // 1. One blocking read. Registering the buffer is optional: it saves a driver query per IO.
  gpufile::RegisteredBuffer registered(memory.get(), size);
  std::size_t n = file.read(memory.get(), size);
  ok = same("read", memory, want) && n == size && ok;

  // 2. Two futures, one per half, running on gpufile's IO workers at once.
  Memory halves(size);
  const std::size_t half = size / 2;
  gpufile::Future first = file.pread(halves.get(), half, 0);
  gpufile::Future second = file.pread(halves.get(), size - half, half, half);
  n = first.get() + second.get();
  ok = same("futures", halves, want) && n == size && ok;

  // 3. One batch of four pieces, completing in any order.
  Memory pieces(size);
  gpufile::IoBatch batch(4);
  std::vector<gpufile::BatchOp> ops;
  const std::size_t piece = (size + 3) / 4;
  for (std::size_t at = 0, i = 0; at < size; at += piece, ++i) {
    const std::size_t len = std::min(piece, size - at);
    ops.push_back({gpufile::IoOp::read, &file, pieces.get(), len,
                   static_cast<std::int64_t>(at), at, i});
  }
  batch.submit(ops);
  n = 0;
  for (const gpufile::BatchCompletion& c : batch.wait(static_cast<unsigned>(ops.size()))) {
    if (!c.ok()) std::printf("cpp_read: piece %llu failed: %s\n",
                             static_cast<unsigned long long>(c.tag), c.error.message().c_str());
    n += c.bytes;
  }
  ok = same("batch", pieces, want) && n == size && ok;

  // 4. A read ordered on a CUDA stream: it runs once the work queued there before it is done,
  // and work queued after it sees its bytes. Stream IO needs a GPU.
  if (memory.on_gpu()) {
    Memory streamed(size);
    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess) throw std::runtime_error("cudaStreamCreate failed");
    {
      gpufile::StreamFuture queued = file.read_async(streamed.get(), size, 0, 0, stream);
      n = queued.get();  // waits until the stream passed the read
    }
    cudaStreamDestroy(stream);
    ok = same("stream", streamed, want) && n == size && ok;
  }

  const gpufile::Stats stats = gpufile::statistics();
  std::printf("cpp_read: bytes read by path: staged direct %llu, page cache %llu, "
              "host direct %llu, small IO %llu\n",
              static_cast<unsigned long long>(stats.read.staged_direct.bytes),
              static_cast<unsigned long long>(stats.read.page_cache.bytes),
              static_cast<unsigned long long>(stats.read.host_direct.bytes),
              static_cast<unsigned long long>(stats.read.small_io.bytes));
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  try {
    const int rc = run(argv[1]);
    std::printf("cpp_read: %s\n", rc == 0 ? "ok" : "FAILED");
    return rc;
  } catch (const gpufile::Exception& e) {  // every gpufile failure: a std::system_error
    std::fprintf(stderr, "cpp_read: %s\n", e.what());
    return 1;
  }
}
