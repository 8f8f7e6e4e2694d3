// `gpufile bench`: a benchmark that takes gdsio's flags and prints gdsio's result line, so
// scripts written for NVIDIA's tool can be pointed at gpufile unchanged. It drives the public
// cuFile C API exactly as an application would; only -x 2 (CPU_GPU) bypasses it on purpose,
// because that transfer type is the "no GDS" baseline.
//
// The data set is cut into lanes: one per thread (-w), or one per batch slot with -x 6. A lane
// owns a byte range of one file and walks it block by block (IO size), in order or shuffled.
#include <cufile.h>
#include <fcntl.h>
#include <getopt.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cuda/driver.hpp"

namespace gpufile::cli {
namespace {

using Clock = std::chrono::steady_clock;

enum class Xfer { gpu_direct = 0, cpu_only = 1, cpu_gpu = 2, gpu_direct_async = 5, gpu_batch = 6 };

const char* xfer_label(Xfer x) {
  switch (x) {
    case Xfer::gpu_direct: return "GPUD";
    case Xfer::cpu_only: return "CPUONLY";
    case Xfer::cpu_gpu: return "CPU_GPU";
    case Xfer::gpu_direct_async: return "GPUD_ASYNC";
    case Xfer::gpu_batch: return "GPU_BATCH";
  }
  return "?";
}

bool uses_gpu_memory(Xfer x) { return x != Xfer::cpu_only; }

// -I values, in gdsio's numbering.
enum class IoType { read = 0, write = 1, randread = 2, randwrite = 3 };

const char* io_label(IoType t) {
  static const char* names[] = {"READ", "WRITE", "RANDREAD", "RANDWRITE"};
  return names[static_cast<int>(t)];
}
bool is_write(IoType t) { return t == IoType::write || t == IoType::randwrite; }
bool is_random(IoType t) { return t == IoType::randread || t == IoType::randwrite; }
IoType read_back_of(IoType t) { return is_random(t) ? IoType::randread : IoType::read; }

struct Options {
  std::string file;  // -f
  std::string dir;   // -D
  int gpu = 0;
  int threads = 1;
  uint64_t size = 0;
  uint64_t io_size = 0;
  uint64_t offset = 0;
  Xfer xfer = Xfer::gpu_direct;
  IoType io_type = IoType::read;
  int seconds = 0;  // 0: one pass over the data set
  uint64_t seed = 0;
  bool verify = false;
  bool skip_buf_register = false;
  bool buffered = false;
  bool json = false;
  bool help = false;
};

// ------------------------------------------------------------------------------------------
// Command line

void bench_usage(FILE* f) {
  std::fputs(
      "usage: gpufile bench (-f FILE | -D DIR) -s SIZE -i IOSIZE [options]\n"
      "  -f FILE   one file shared by all threads, each thread takes an equal slice\n"
      "  -D DIR    one file per thread, DIR/gdsio.<n>\n"
      "  -s SIZE   data set size: of FILE, or of each per-thread file (K/M/G are binary)\n"
      "  -i SIZE   bytes per IO\n"
      "  -o SIZE   start offset in the file (0)\n"
      "  -w N      threads; with -x 6 the number of IOs in flight per batch (1)\n"
      "  -d N      GPU index (0)\n"
      "  -x N      transfer type: 0 GPU direct, 1 CPU only, 2 CPU then GPU copy,\n"
      "            5 GPU direct on a CUDA stream, 6 GPU batch (0)\n"
      "  -I N      0 read, 1 write, 2 random read, 3 random write (0)\n"
      "  -T SECS   keep going for SECS seconds, wrapping over the data set\n"
      "  -k SEED   seed of the random order and of -V data (0)\n"
      "  -V        verify: write self-checking blocks; check them when reading\n"
      "  -b        leave IO buffers unregistered (no cuFileBufRegister)\n"
      "  -O 0|1    0 opens files with O_DIRECT, 1 goes through the page cache (0)\n"
      "  --json    also print the result as a JSON object with latency percentiles\n",
      f);
}

bool parse_int(const char* text, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_u64(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno || end == text || *end != '\0') return false;
  *out = v;
  return true;
}

bool supported(Xfer x) {
  int v = static_cast<int>(x);
  return v <= 2 || v == 5 || v == 6;
}

// 3, 4 and 7 are gdsio types still to come; options_consistent() says so.
bool parse_xfer(const char* text, Xfer* out) {
  int v = 0;
  if (!parse_int(text, 0, 7, &v)) return false;
  *out = static_cast<Xfer>(v);
  return true;
}

bool parse_byte_size(const char* flag, const char* text, uint64_t* out) {
  unsigned long long v = 0;
  if (std::strchr(text, ':')) {
    std::fprintf(stderr, "gpufile bench: %s: IO size ranges are not supported yet\n", flag);
    return false;
  }
  if (!parse_size(text, &v)) return false;
  *out = v;
  return true;
}

// One flag and its argument; false on anything malformed.
bool apply_flag(int c, const char* arg, Options* o) {
  int v = 0;
  switch (c) {
    case 'f': o->file = arg; return true;
    case 'D': o->dir = arg; return true;
    case 'd': return parse_int(arg, 0, 1023, &o->gpu);
    case 'w': return parse_int(arg, 1, 4096, &o->threads);
    case 's': return parse_byte_size("-s", arg, &o->size);
    case 'i': return parse_byte_size("-i", arg, &o->io_size);
    case 'o': return parse_byte_size("-o", arg, &o->offset);
    case 'x': return parse_xfer(arg, &o->xfer);
    case 'I': return parse_int(arg, 0, 3, &v) && (o->io_type = static_cast<IoType>(v), true);
    case 'T': return parse_int(arg, 1, 1 << 30, &o->seconds);
    case 'k': return parse_u64(arg, &o->seed);
    case 'V': o->verify = true; return true;
    case 'b': o->skip_buf_register = true; return true;
    case 'O': return parse_int(arg, 0, 1, &v) && (o->buffered = v == 1, true);
    case 'j': o->json = true; return true;
    case 'h': o->help = true; return true;
    default: return false;
  }
}

// The combinations no flag can catch on its own.
bool options_consistent(const Options& o) {
  const char* why = nullptr;
  if (!supported(o.xfer)) why = "-x: transfer types 3, 4 and 7 are not implemented yet "
                                "(supported: 0, 1, 2, 5, 6)";
  else if (o.file.empty() == o.dir.empty()) why = "give exactly one of -f and -D";
  else if (o.size == 0) why = "-s (data set size) is required and must be > 0";
  else if (o.io_size == 0) why = "-i (IO size) is required and must be > 0";
  else if (o.xfer == Xfer::gpu_batch && o.threads > 128)
    why = "-x 6 allows at most 128 IOs per batch (-w)";
  if (why) std::fprintf(stderr, "gpufile bench: %s\n", why);
  return why == nullptr;
}

bool parse_options(int argc, char** argv, Options* o) {
  static const option longs[] = {{"json", no_argument, nullptr, 'j'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  optind = 1;  // getopt keeps state across calls; start over
  opterr = 0;  // our own messages, with our own name in them
  int c = 0;
  while ((c = getopt_long(argc, argv, ":f:D:d:w:s:i:o:x:I:T:k:VbO:h", longs, nullptr)) != -1) {
    if (c == '?' || c == ':') {
      const char* what = c == ':' ? "missing value for" : "unknown flag";
      std::fprintf(stderr, "gpufile bench: %s %s\n", what, argv[optind - 1]);
      return false;
    }
    if (!apply_flag(c, optarg, o)) {
      std::fprintf(stderr, "gpufile bench: bad value for -%c: '%s'\n", c, optarg ? optarg : "");
      return false;
    }
  }
  if (o->help) return true;
  if (optind < argc) {
    std::fprintf(stderr, "gpufile bench: unexpected argument '%s'\n", argv[optind]);
    return false;
  }
  return options_consistent(*o);
}

// ------------------------------------------------------------------------------------------
// Self-checking blocks for -V. Every block starts with a header saying where it belongs and
// which run wrote it; the checksum covers the header and the payload, so a flipped byte, a
// block landing at the wrong offset, or a block left over from another run is each caught.

struct BlockHeader {
  uint64_t magic;
  uint64_t offset;  // file offset the block was written to
  uint64_t seed;    // -k of the writing run
  uint64_t length;
  uint64_t checksum;
  uint64_t reserved[3];
};
static_assert(sizeof(BlockHeader) == 64);
constexpr uint64_t kBlockMagic = 0x6770756662656e63ull;  // "gpufbenc"
constexpr size_t kChecksumAt = offsetof(BlockHeader, checksum);

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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

// Empty when the block is what a -V write of (offset, seed, len) left; else what is wrong.
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

// ------------------------------------------------------------------------------------------
// Device and memory. Without a CUDA driver, host memory stands in for device memory so the
// tool still runs (CI has no GPU).

struct Gpu {
  const cuda::Driver* drv = nullptr;
  cuda::CUcontext ctx = nullptr;
  cuda::CUdevice dev = 0;

  bool open(int ordinal) {
    drv = cuda::driver();
    if (!drv) return true;
    if (ordinal >= drv->device_count) {
      std::fprintf(stderr, "gpufile bench: no GPU %d (%d present)\n", ordinal, drv->device_count);
      return false;
    }
    if (drv->DeviceGet(&dev, ordinal) != cuda::CUDA_SUCCESS ||
        drv->DevicePrimaryCtxRetain(&ctx, dev) != cuda::CUDA_SUCCESS) {
      std::fprintf(stderr, "gpufile bench: cannot open GPU %d\n", ordinal);
      return false;
    }
    bind_thread();
    return true;
  }
  // CUDA contexts are per thread; every worker must make ours current.
  void bind_thread() const {
    if (drv) drv->CtxSetCurrent(ctx);
  }
  void close() {
    if (drv && ctx) drv->DevicePrimaryCtxRelease(dev);
  }
};

enum class Mem { device, host, pinned };

class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  bool allocate(Mem kind, const Gpu& gpu, uint64_t bytes) {
    drv_ = gpu.drv;
    kind_ = drv_ ? kind : Mem::host;
    bytes_ = bytes;
    if (kind_ == Mem::device) return drv_->MemAlloc(&dev_, bytes) == cuda::CUDA_SUCCESS;
    if (kind_ == Mem::pinned)
      return drv_->MemHostAlloc(reinterpret_cast<void**>(&host_), bytes, 0) == cuda::CUDA_SUCCESS;
    void* p = nullptr;
    if (posix_memalign(&p, 4096, (bytes + 4095) & ~uint64_t{4095}) != 0) return false;
    host_ = static_cast<char*>(p);
    return true;
  }
  void* ptr() const { return kind_ == Mem::device ? reinterpret_cast<void*>(dev_) : host_; }
  uint64_t bytes() const { return bytes_; }
  bool put(uint64_t at, const void* src, uint64_t n) const {
    if (kind_ != Mem::device) return std::memcpy(host_ + at, src, n), true;
    return drv_->MemcpyHtoD(dev_ + at, src, n) == cuda::CUDA_SUCCESS;
  }
  bool get(uint64_t at, void* dst, uint64_t n) const {
    if (kind_ != Mem::device) return std::memcpy(dst, host_ + at, n), true;
    return drv_->MemcpyDtoH(dst, dev_ + at, n) == cuda::CUDA_SUCCESS;
  }
  void release() {
    if (kind_ == Mem::device && dev_) drv_->MemFree(dev_);
    if (kind_ == Mem::pinned && host_) drv_->MemFreeHost(host_);
    if (kind_ == Mem::host) std::free(host_);
    dev_ = 0;
    host_ = nullptr;
  }

 private:
  Mem kind_ = Mem::host;
  const cuda::Driver* drv_ = nullptr;
  cuda::CUdeviceptr dev_ = 0;
  char* host_ = nullptr;
  uint64_t bytes_ = 0;
};

// Without -V, writes carry this instead of zeros (which some devices compress).
bool fill_noise(const Buffer& buf, uint64_t seed) {
  std::vector<char> noise(buf.bytes());
  for (uint64_t i = 0; i + 8 <= noise.size(); i += 8) {
    uint64_t w = mix(seed + i);
    std::memcpy(noise.data() + i, &w, 8);
  }
  return buf.put(0, noise.data(), noise.size());
}

bool register_buffer(const Buffer& buf, const Options& o) {
  if (o.skip_buf_register) return true;
  CUfileError_t e = cuFileBufRegister(buf.ptr(), buf.bytes(), 0);
  if (e.err == CU_FILE_SUCCESS) return true;
  std::fprintf(stderr, "gpufile bench: cuFileBufRegister: %s\n", CUFILE_ERRSTR(e.err));
  return false;
}

void deregister_buffer(const Buffer& buf, const Options& o) {
  if (!o.skip_buf_register) cuFileBufDeregister(buf.ptr());
}

// ------------------------------------------------------------------------------------------
// Lanes: a file, a byte range of it, and the order its blocks are visited in.

struct Block {
  uint64_t offset = 0;
  uint64_t length = 0;
};

class Lane {
 public:
  std::string path;
  int fd = -1;
  CUfileHandle_t handle = nullptr;

  void plan(uint64_t begin, uint64_t end, uint64_t io, bool random, uint64_t seed) {
    end_ = end;
    random_ = random;
    rng_.seed(seed);
    for (uint64_t off = begin; off < end; off += io) order_.push_back(off);
    io_ = io;
    if (random_) std::shuffle(order_.begin(), order_.end(), rng_);
  }
  // The next block; after the last one of a pass, starts over (reshuffled) and says so in
  // `wrapped` so one-pass runs can stop there.
  Block next(bool* wrapped) {
    *wrapped = false;
    if (cursor_ == order_.size()) {
      cursor_ = 0;
      *wrapped = true;
      if (random_) std::shuffle(order_.begin(), order_.end(), rng_);
    }
    uint64_t off = order_[cursor_++];
    return Block{off, std::min(io_, end_ - off)};
  }
  bool pass_done() const { return cursor_ == order_.size(); }

 private:
  std::vector<uint64_t> order_;
  size_t cursor_ = 0;
  uint64_t end_ = 0;
  uint64_t io_ = 0;
  bool random_ = false;
  std::mt19937_64 rng_;
};

bool open_lane(Lane* lane, bool writing, bool buffered, bool want_handle) {
  int flags = (writing ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC | (buffered ? 0 : O_DIRECT);
  lane->fd = ::open(lane->path.c_str(), flags, 0644);
  if (lane->fd < 0 && errno == EINVAL && !buffered) {  // a file system without O_DIRECT
    static bool told = false;
    if (!std::exchange(told, true))
      std::fprintf(stderr, "gpufile bench: %s: no O_DIRECT here; using the page cache\n",
                   lane->path.c_str());
    lane->fd = ::open(lane->path.c_str(), flags & ~O_DIRECT, 0644);
  }
  if (lane->fd < 0) {
    std::fprintf(stderr, "gpufile bench: %s: %s%s\n", lane->path.c_str(), std::strerror(errno),
                 writing ? "" : " (run a write pass first)");
    return false;
  }
  if (!want_handle) return true;
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = lane->fd;
  CUfileError_t e = cuFileHandleRegister(&lane->handle, &d);
  if (e.err == CU_FILE_SUCCESS) return true;
  std::fprintf(stderr, "gpufile bench: cuFileHandleRegister(%s): %s\n", lane->path.c_str(),
               CUFILE_ERRSTR(e.err));
  return false;
}

void close_lane(Lane* lane) {
  if (lane->handle) cuFileHandleDeregister(lane->handle);
  if (lane->fd >= 0) ::close(lane->fd);
  lane->handle = nullptr;
  lane->fd = -1;
}

// -f: the threads split the file; the last one also takes what does not divide evenly.
// -D: every lane has a whole file of -s bytes.
bool plan_lanes(const Options& o, IoType type, std::vector<Lane>* lanes) {
  const int n = o.threads;
  const uint64_t slice = o.file.empty() ? o.size : o.size / n / o.io_size * o.io_size;
  if (slice == 0) {
    std::fprintf(stderr, "gpufile bench: -s %llu is too small for %d threads of -i %llu\n",
                 static_cast<unsigned long long>(o.size), n,
                 static_cast<unsigned long long>(o.io_size));
    return false;
  }
  *lanes = std::vector<Lane>(n);
  for (int t = 0; t < n; ++t) {
    Lane& l = (*lanes)[t];
    const bool shared = !o.file.empty();
    l.path = shared ? o.file : o.dir + "/gdsio." + std::to_string(t);
    uint64_t begin = o.offset + (shared ? slice * t : 0);
    uint64_t end = shared && t == n - 1 ? o.offset + o.size : begin + slice;
    uint64_t tail = (end - begin) % o.io_size;
    if (o.verify && tail != 0 && tail < sizeof(BlockHeader)) {
      std::fprintf(stderr, "gpufile bench: -V needs every IO to hold at least %zu bytes; "
                           "the last one of a slice would hold %llu\n",
                   sizeof(BlockHeader), static_cast<unsigned long long>(tail));
      return false;
    }
    l.plan(begin, end, o.io_size, is_random(type), o.seed * 1000003 + t);
  }
  return true;
}

// ------------------------------------------------------------------------------------------
// Movers: one IO of one lane, the way its transfer type does it.

class Mover {
 public:
  virtual ~Mover() = default;
  virtual bool start(const Gpu& gpu, const Options& o, Lane* lane) = 0;
  virtual ssize_t read(const Block& b) = 0;
  virtual ssize_t write(const Block& b) = 0;
  virtual const Buffer& data() const = 0;  // where an IO's bytes are, for -V
  virtual void stop(const Options&) {}
};

// -x 0 and -x 1: cuFileRead/Write straight into the buffer.
class CuFileMover : public Mover {
 public:
  explicit CuFileMover(Mem mem) : mem_(mem) {}
  bool start(const Gpu& gpu, const Options& o, Lane* lane) override {
    lane_ = lane;
    return buf_.allocate(mem_, gpu, o.io_size) && fill_noise(buf_, o.seed) &&
           (registered_ = register_buffer(buf_, o));
  }
  ssize_t read(const Block& b) override {
    return cuFileRead(lane_->handle, buf_.ptr(), b.length, static_cast<off_t>(b.offset), 0);
  }
  ssize_t write(const Block& b) override {
    return cuFileWrite(lane_->handle, buf_.ptr(), b.length, static_cast<off_t>(b.offset), 0);
  }
  const Buffer& data() const override { return buf_; }
  void stop(const Options& o) override {
    if (registered_) deregister_buffer(buf_, o);
  }

 private:
  Mem mem_;
  Buffer buf_;
  Lane* lane_ = nullptr;
  bool registered_ = false;
};

// -x 2: the classic path without GDS: POSIX IO into pinned memory, then a copy to the GPU.
class CpuGpuMover : public Mover {
 public:
  bool start(const Gpu& gpu, const Options& o, Lane* lane) override {
    lane_ = lane;
    return bounce_.allocate(Mem::pinned, gpu, o.io_size) &&
           gpu_.allocate(Mem::device, gpu, o.io_size) && fill_noise(gpu_, o.seed);
  }
  ssize_t read(const Block& b) override {
    ssize_t n = ::pread(lane_->fd, bounce_.ptr(), b.length, static_cast<off_t>(b.offset));
    if (n > 0 && !gpu_.put(0, bounce_.ptr(), static_cast<uint64_t>(n))) return -1;
    return n;
  }
  ssize_t write(const Block& b) override {
    if (!gpu_.get(0, bounce_.ptr(), b.length)) return -1;
    return ::pwrite(lane_->fd, bounce_.ptr(), b.length, static_cast<off_t>(b.offset));
  }
  const Buffer& data() const override { return gpu_; }

 private:
  Buffer bounce_, gpu_;
  Lane* lane_ = nullptr;
};

// -x 5: cuFileReadAsync/WriteAsync on the lane's own stream, waiting for each IO so that its
// latency can be taken. The stream API reads its arguments when the IO runs, hence members.
class AsyncMover : public Mover {
 public:
  bool start(const Gpu& gpu, const Options& o, Lane* lane) override {
    lane_ = lane;
    drv_ = gpu.drv;
    if (!buf_.allocate(Mem::device, gpu, o.io_size) || !fill_noise(buf_, o.seed)) return false;
    if (!(registered_ = register_buffer(buf_, o))) return false;
    if (!drv_) return true;  // no streams without a driver: synchronous calls stand in
    if (drv_->StreamCreate(&stream_, cuda::CU_STREAM_NON_BLOCKING) != cuda::CUDA_SUCCESS) {
      std::fprintf(stderr, "gpufile bench: cuStreamCreate failed\n");
      return false;
    }
    return cuFileStreamRegister(cu_stream(), 0).err == CU_FILE_SUCCESS;
  }
  ssize_t read(const Block& b) override { return run(b, false); }
  ssize_t write(const Block& b) override { return run(b, true); }
  const Buffer& data() const override { return buf_; }
  void stop(const Options& o) override {
    if (stream_) {
      cuFileStreamDeregister(cu_stream());
      drv_->StreamDestroy(stream_);
    }
    if (registered_) deregister_buffer(buf_, o);
  }

 private:
  CUstream cu_stream() const { return reinterpret_cast<CUstream>(stream_); }
  ssize_t run(const Block& b, bool writing) {
    const off_t off = static_cast<off_t>(b.offset);
    if (!drv_)
      return writing ? cuFileWrite(lane_->handle, buf_.ptr(), b.length, off, 0)
                     : cuFileRead(lane_->handle, buf_.ptr(), b.length, off, 0);
    size_ = b.length;
    file_off_ = off;
    buf_off_ = 0;
    CUfileError_t e =
        writing ? cuFileWriteAsync(lane_->handle, buf_.ptr(), &size_, &file_off_, &buf_off_,
                                   &done_, cu_stream())
                : cuFileReadAsync(lane_->handle, buf_.ptr(), &size_, &file_off_, &buf_off_,
                                  &done_, cu_stream());
    if (e.err != CU_FILE_SUCCESS) return -e.err;
    if (drv_->StreamSynchronize(stream_) != cuda::CUDA_SUCCESS) return -1;
    return done_;
  }

  Buffer buf_;
  Lane* lane_ = nullptr;
  const cuda::Driver* drv_ = nullptr;
  cuda::CUstream stream_ = nullptr;
  bool registered_ = false;
  size_t size_ = 0;
  off_t file_off_ = 0, buf_off_ = 0;
  ssize_t done_ = 0;
};

std::unique_ptr<Mover> make_mover(Xfer x) {
  switch (x) {
    case Xfer::gpu_direct: return std::make_unique<CuFileMover>(Mem::device);
    case Xfer::cpu_only: return std::make_unique<CuFileMover>(Mem::host);
    case Xfer::cpu_gpu: return std::make_unique<CpuGpuMover>();
    case Xfer::gpu_direct_async: return std::make_unique<AsyncMover>();
    case Xfer::gpu_batch: break;  // has its own runner
  }
  return nullptr;
}

// ------------------------------------------------------------------------------------------
// Running: what every lane collects, and the stop/failure state they share.

struct LaneStats {
  std::vector<double> latency_us;
  uint64_t bytes = 0;
};

class RunState {
 public:
  RunState(const Options& o, IoType type) : opt(o), type(type) {
    if (o.seconds > 0) deadline_ = Clock::now() + std::chrono::seconds(o.seconds);
  }
  const Options& opt;
  const IoType type;

  bool timed() const { return opt.seconds > 0; }
  bool should_stop() const {
    return failed_.load(std::memory_order_relaxed) || (timed() && Clock::now() >= deadline_);
  }
  void fail(const std::string& message) {
    std::lock_guard lock(mu_);
    if (!failed_.exchange(true)) message_ = message;
  }
  bool failed() const { return failed_.load(); }
  const std::string& message() const { return message_; }

 private:
  Clock::time_point deadline_{};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::string message_;
};

std::string at(const Lane& lane, const Block& b) {
  return "offset " + std::to_string(b.offset) + " of " + lane.path;
}

bool io_completed(RunState& run, const Lane& lane, const Block& b, ssize_t n) {
  if (n == static_cast<ssize_t>(b.length)) return true;
  run.fail(std::string(is_write(run.type) ? "write" : "read") + " at " + at(lane, b) +
           " moved " + std::to_string(n) + " of " + std::to_string(b.length) + " bytes" +
           (n < 0 ? " (errno " + std::to_string(errno) + ")" : ""));
  return false;
}

// -V, before a write: the self-checking block goes into the IO buffer.
bool stage_block(RunState& run, const Buffer& buf, uint64_t at_byte, const Lane& lane,
                 const Block& b, std::vector<char>* scratch) {
  fill_block(scratch->data(), b.length, b.offset, run.opt.seed);
  if (buf.put(at_byte, scratch->data(), b.length)) return true;
  run.fail("copy into the IO buffer failed for " + at(lane, b));
  return false;
}

// -V, after a read.
bool check_read(RunState& run, const Buffer& buf, uint64_t at_byte, const Lane& lane,
                const Block& b, std::vector<char>* scratch) {
  if (!buf.get(at_byte, scratch->data(), b.length)) {
    run.fail("copy out of the IO buffer failed for " + at(lane, b));
    return false;
  }
  std::string why = check_block(scratch->data(), b.length, b.offset, run.opt.seed);
  if (why.empty()) return true;
  run.fail("verification failed at " + at(lane, b) + ": " + why);
  return false;
}

double micros(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

void run_lane(RunState& run, Lane& lane, Mover& mover, LaneStats& stats) {
  const bool writing = is_write(run.type);
  std::vector<char> scratch(run.opt.verify ? run.opt.io_size : 0);
  while (!run.should_stop() && (run.timed() || !lane.pass_done())) {
    bool wrapped = false;
    Block b = lane.next(&wrapped);
    if (writing && run.opt.verify && !stage_block(run, mover.data(), 0, lane, b, &scratch)) return;
    auto t0 = Clock::now();
    ssize_t n = writing ? mover.write(b) : mover.read(b);
    stats.latency_us.push_back(micros(t0, Clock::now()));
    if (!io_completed(run, lane, b, n)) return;
    stats.bytes += b.length;
    if (!writing && run.opt.verify && !check_read(run, mover.data(), 0, lane, b, &scratch)) return;
  }
}

bool run_threads(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes,
                 std::vector<LaneStats>* stats) {
  std::vector<std::unique_ptr<Mover>> movers;
  bool ok = true;
  for (Lane& lane : lanes) {
    movers.push_back(make_mover(run.opt.xfer));
    if (!movers.back()->start(gpu, run.opt, &lane)) {
      std::fprintf(stderr, "gpufile bench: could not set up IO buffers for %s\n",
                   lane.path.c_str());
      ok = false;
      break;
    }
  }
  if (ok) {
    std::vector<std::thread> workers;
    for (size_t t = 0; t < lanes.size(); ++t)
      workers.emplace_back([&, t] {
        gpu.bind_thread();
        run_lane(run, lanes[t], *movers[t], (*stats)[t]);
      });
    for (auto& w : workers) w.join();
  }
  for (auto& m : movers) m->stop(run.opt);
  return ok;
}

// ------------------------------------------------------------------------------------------
// -x 6: one thread keeps one batch of -w IOs in flight, one IO per lane, each lane with its
// own slot of a shared buffer.

struct BatchRound {
  std::vector<CUfileIOParams_t> params;
  std::vector<Block> blocks;  // by lane
  Clock::time_point submitted;
};

// Takes the next block of every lane that still has one; false when none has.
bool fill_round(RunState& run, std::vector<Lane>& lanes, const Buffer& buf,
                std::vector<char>* scratch, BatchRound* round) {
  round->params.clear();
  const bool writing = is_write(run.type);
  for (size_t j = 0; j < lanes.size(); ++j) {
    if (!run.timed() && lanes[j].pass_done()) continue;
    bool wrapped = false;
    Block b = lanes[j].next(&wrapped);
    round->blocks[j] = b;
    const uint64_t slot = j * run.opt.io_size;
    if (writing && run.opt.verify && !stage_block(run, buf, slot, lanes[j], b, scratch))
      return false;
    CUfileIOParams_t p{};
    p.mode = CUFILE_BATCH;
    p.u.batch = {buf.ptr(), static_cast<off_t>(b.offset), static_cast<off_t>(slot), b.length};
    p.fh = lanes[j].handle;
    p.opcode = writing ? CUFILE_WRITE : CUFILE_READ;
    p.cookie = reinterpret_cast<void*>(j);
    round->params.push_back(p);
  }
  return !round->params.empty();
}

// Reaps the whole round, timing each IO from submission to the moment it was seen complete.
bool reap_round(RunState& run, CUfileBatchHandle_t batch, std::vector<Lane>& lanes,
                const BatchRound& round, LaneStats& stats) {
  std::vector<CUfileIOEvents_t> events(round.params.size());
  size_t reaped = 0;
  while (reaped < round.params.size()) {
    unsigned got = static_cast<unsigned>(events.size());
    CUfileError_t e = cuFileBatchIOGetStatus(batch, 1, &got, events.data(), nullptr);
    if (e.err != CU_FILE_SUCCESS) return run.fail("cuFileBatchIOGetStatus failed"), false;
    auto now = Clock::now();
    for (unsigned k = 0; k < got; ++k) {
      size_t j = reinterpret_cast<size_t>(events[k].cookie);
      ssize_t n = events[k].status == CUFILE_COMPLETE ? static_cast<ssize_t>(events[k].ret) : -1;
      stats.latency_us.push_back(micros(round.submitted, now));
      if (!io_completed(run, lanes[j], round.blocks[j], n)) return false;
      stats.bytes += round.blocks[j].length;
    }
    reaped += got;
  }
  return true;
}

bool check_round(RunState& run, std::vector<Lane>& lanes, const Buffer& buf,
                 const BatchRound& round, std::vector<char>* scratch) {
  for (const CUfileIOParams_t& p : round.params) {
    size_t j = reinterpret_cast<size_t>(p.cookie);
    if (!check_read(run, buf, j * run.opt.io_size, lanes[j], round.blocks[j], scratch))
      return false;
  }
  return true;
}

void drive_batches(RunState& run, CUfileBatchHandle_t batch, std::vector<Lane>& lanes,
                   const Buffer& buf, LaneStats& stats) {
  BatchRound round;
  round.blocks.resize(lanes.size());
  std::vector<char> scratch(run.opt.verify ? run.opt.io_size : 0);
  const bool check = run.opt.verify && !is_write(run.type);
  while (!run.should_stop() && fill_round(run, lanes, buf, &scratch, &round)) {
    round.submitted = Clock::now();
    CUfileError_t e = cuFileBatchIOSubmit(batch, static_cast<unsigned>(round.params.size()),
                                          round.params.data(), 0);
    if (e.err != CU_FILE_SUCCESS)
      return run.fail(std::string("cuFileBatchIOSubmit: ") + CUFILE_ERRSTR(e.err));
    if (!reap_round(run, batch, lanes, round, stats)) return;
    if (check && !check_round(run, lanes, buf, round, &scratch)) return;
  }
}

bool run_batch(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes, LaneStats* stats) {
  Buffer buf;
  if (!buf.allocate(Mem::device, gpu, run.opt.io_size * lanes.size()) ||
      !fill_noise(buf, run.opt.seed) || !register_buffer(buf, run.opt))
    return std::fprintf(stderr, "gpufile bench: could not set up the batch buffer\n"), false;
  CUfileBatchHandle_t batch = nullptr;
  CUfileError_t e = cuFileBatchIOSetUp(&batch, static_cast<unsigned>(lanes.size()));
  if (e.err != CU_FILE_SUCCESS) {
    std::fprintf(stderr, "gpufile bench: cuFileBatchIOSetUp: %s\n", CUFILE_ERRSTR(e.err));
  } else {
    drive_batches(run, batch, lanes, buf, *stats);
    if (run.failed()) cuFileBatchIOCancel(batch);
    cuFileBatchIODestroy(batch);
  }
  deregister_buffer(buf, run.opt);
  return e.err == CU_FILE_SUCCESS;
}

// ------------------------------------------------------------------------------------------
// Results

struct Result {
  IoType type = IoType::read;
  Xfer xfer = Xfer::gpu_direct;
  int threads = 0;
  uint64_t done_bytes = 0, total_bytes = 0, io_size = 0;
  double seconds = 0, cpu_seconds = 0;
  std::vector<double> latency_us;  // sorted
};

double cpu_seconds_now() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](timeval tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

double gib_per_sec(const Result& r) {
  return r.seconds > 0 ? (r.done_bytes / 1024.0) / r.seconds / (1024.0 * 1024.0) : 0;
}

// gdsio's line, field for field (spec §6.3); batch runs report the depth, not threads.
void print_line(const Result& r) {
  std::printf("IoType: %s XferType: %s Threads: ", io_label(r.type), xfer_label(r.xfer));
  if (r.xfer == Xfer::gpu_batch) std::printf("1 IoDepth: %d", r.threads);
  else std::printf("%d", r.threads);
  std::printf(" DataSetSize: %llu/%llu(KiB) IOSize: %llu(KiB) Throughput: %f GiB/sec, "
              "Avg_Latency: %f usecs ops: %zu total_time %f secs\n",
              static_cast<unsigned long long>(r.done_bytes / 1024),
              static_cast<unsigned long long>(r.total_bytes / 1024),
              static_cast<unsigned long long>(r.io_size / 1024), gib_per_sec(r),
              mean(r.latency_us), r.latency_us.size(), r.seconds);
}

void print_json(const Result& r) {
  const bool batch = r.xfer == Xfer::gpu_batch;
  const double gib = r.done_bytes / double(1ull << 30);
  std::printf("{\"io_type\": \"%s\", \"xfer_type\": \"%s\", \"threads\": %d, ", io_label(r.type),
              xfer_label(r.xfer), batch ? 1 : r.threads);
  if (batch) std::printf("\"io_depth\": %d, ", r.threads);
  std::printf("\"dataset_done_kib\": %llu, \"dataset_total_kib\": %llu, \"io_size_kib\": %llu, "
              "\"throughput_gib_s\": %f, \"avg_latency_us\": %f, \"ops\": %zu, "
              "\"total_time_s\": %f, \"p50_latency_us\": %f, \"p99_latency_us\": %f, "
              "\"max_latency_us\": %f, \"cpu_s_per_gib\": %f}\n",
              static_cast<unsigned long long>(r.done_bytes / 1024),
              static_cast<unsigned long long>(r.total_bytes / 1024),
              static_cast<unsigned long long>(r.io_size / 1024), gib_per_sec(r),
              mean(r.latency_us), r.latency_us.size(), r.seconds, percentile(r.latency_us, 0.5),
              percentile(r.latency_us, 0.99), percentile(r.latency_us, 1.0),
              gib > 0 ? r.cpu_seconds / gib : 0.0);
}

Result summarise(const Options& o, IoType type, double secs, double cpu,
                 std::vector<LaneStats>& stats) {
  Result r;
  r.type = type;
  r.xfer = o.xfer;
  r.threads = o.threads;
  r.io_size = o.io_size;
  r.total_bytes = o.file.empty() ? o.size * o.threads : o.size;
  r.seconds = secs;
  r.cpu_seconds = cpu;
  for (LaneStats& s : stats) {
    r.done_bytes += s.bytes;
    r.latency_us.insert(r.latency_us.end(), s.latency_us.begin(), s.latency_us.end());
  }
  std::sort(r.latency_us.begin(), r.latency_us.end());
  return r;
}

// One run of one IO type over the data set; prints its result line. 0, or 1 on failure.
int run_once(const Gpu& gpu, const Options& o, IoType type) {
  std::vector<Lane> lanes;
  if (!plan_lanes(o, type, &lanes)) return 1;
  bool ok = true;
  for (Lane& lane : lanes)
    ok = ok && open_lane(&lane, is_write(type), o.buffered, o.xfer != Xfer::cpu_gpu);
  RunState run(o, type);
  const bool batch = o.xfer == Xfer::gpu_batch;
  std::vector<LaneStats> stats(batch ? 1 : lanes.size());
  const double cpu0 = cpu_seconds_now();
  const auto t0 = Clock::now();
  if (ok) ok = batch ? run_batch(gpu, run, lanes, &stats[0]) : run_threads(gpu, run, lanes, &stats);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds_now() - cpu0;
  for (Lane& lane : lanes) close_lane(&lane);
  if (!ok) return 1;
  if (run.failed()) {
    std::fprintf(stderr, "gpufile bench: %s\n", run.message().c_str());
    return 1;
  }
  Result r = summarise(o, type, secs, cpu, stats);
  print_line(r);
  if (o.json) print_json(r);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int bench(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, &o)) return bench_usage(stderr), 2;
  if (o.help) return bench_usage(stdout), 0;
  Gpu gpu;
  if (!gpu.open(o.gpu)) return 1;
  if (!gpu.drv && uses_gpu_memory(o.xfer))
    std::fprintf(stderr, "gpufile bench: no GPU (%s); host memory stands in for GPU memory\n",
                 cuda::why_no_driver().c_str());
  CUfileError_t e = cuFileDriverOpen();
  if (e.err != CU_FILE_SUCCESS) {
    std::fprintf(stderr, "gpufile bench: cuFileDriverOpen: %s\n", CUFILE_ERRSTR(e.err));
    return gpu.close(), 1;
  }
  int rc = run_once(gpu, o, o.io_type);
  if (rc == 0 && o.verify && is_write(o.io_type)) {
    std::printf("Verifying data\n");
    Options check = o;
    check.seconds = 0;  // one pass reads back every block the write left
    rc = run_once(gpu, check, read_back_of(o.io_type));
  }
  cuFileDriverClose();
  gpu.close();
  return rc;
}

}  // namespace gpufile::cli
