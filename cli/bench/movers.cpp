#include "cli/bench/movers.hpp"

#include <cufile.h>
#include <unistd.h>

#include <cstdio>

namespace gpufile::cli::benchmark {
namespace {

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

}  // namespace

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

}  // namespace gpufile::cli::benchmark
