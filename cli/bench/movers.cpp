#include "cli/bench/movers.hpp"

#include <cufile.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

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

// -x 2 and -x 4: the classic path without GDS: POSIX IO into pinned memory, then a copy to
// the GPU. -x 4 differs only in its file descriptor (no O_DIRECT: the page cache in between).
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

// -x 3: POSIX IO into two pinned buffers in turn (double buffering). A read queues its copy
// to the GPU on the lane's stream and returns, so the copy runs while the next read fills the
// other buffer; a buffer is read into again only once the copy out of it has finished. A
// read's latency is therefore the read plus the queueing, not the copy it overlaps.
// Writes copy GPU -> pinned on the stream and wait for it before the pwrite: the next
// block's data is only staged (-V) when its own write comes, so there is nothing to overlap.
class CpuAsyncGpuMover : public Mover {
 public:
  bool start(const Gpu& gpu, const Options& o, Lane* lane) override {
    lane_ = lane;
    for (int k = 0; k < 2; ++k)
      if (!bounce_[k].allocate(Mem::pinned, gpu, o.io_size) || !copied_[k].create(gpu))
        return false;
    return gpu_.allocate(Mem::device, gpu, o.io_size) && fill_noise(gpu_, o.seed) &&
           stream_.create(gpu);
  }
  ssize_t read(const Block& b) override {
    const int k = take_turn();
    if (!copied_[k].wait()) return -1;
    ssize_t n = ::pread(lane_->fd, bounce_[k].ptr(), b.length, static_cast<off_t>(b.offset));
    if (n > 0 && !(gpu_.put_async(0, bounce_[k].ptr(), static_cast<uint64_t>(n), stream_) &&
                   copied_[k].record(stream_)))
      return -1;
    return n;
  }
  ssize_t write(const Block& b) override {
    const int k = take_turn();
    if (!copied_[k].wait() || !gpu_.get_async(0, bounce_[k].ptr(), b.length, stream_) ||
        !copied_[k].record(stream_) || !copied_[k].wait())
      return -1;
    return ::pwrite(lane_->fd, bounce_[k].ptr(), b.length, static_cast<off_t>(b.offset));
  }
  const Buffer& data() const override { return gpu_; }
  bool settle() override { return copied_[0].wait() & copied_[1].wait(); }
  void stop(const Options&) override {
    settle();  // no copy may still read a pinned buffer when it is freed
    stream_.destroy();
  }

 private:
  int take_turn() { return std::exchange(turn_, turn_ ^ 1); }

  Buffer bounce_[2], gpu_;
  Event copied_[2];  // the copy out of (or into) bounce_[k] has finished
  Stream stream_;
  int turn_ = 0;
  Lane* lane_ = nullptr;
};

// -x 5: cuFileReadAsync/WriteAsync on the lane's own stream, waiting for each IO so that its
// latency can be taken. The stream API reads its arguments when the IO runs, hence members.
class AsyncMover : public Mover {
 public:
  bool start(const Gpu& gpu, const Options& o, Lane* lane) override {
    lane_ = lane;
    if (!buf_.allocate(io_memory(o), gpu, o.io_size) || !fill_noise(buf_, o.seed)) return false;
    if (!(registered_ = register_buffer(buf_, o))) return false;
    if (!gpu.drv) return true;  // no streams without a driver: synchronous calls stand in
    if (!stream_.create(gpu)) {
      std::fprintf(stderr, "gpufile bench: cuStreamCreate failed\n");
      return false;
    }
    return stream_registered_ = cuFileStreamRegister(stream_.cufile(), 0).err == CU_FILE_SUCCESS;
  }
  ssize_t read(const Block& b) override { return run(b, false); }
  ssize_t write(const Block& b) override { return run(b, true); }
  const Buffer& data() const override { return buf_; }
  void stop(const Options& o) override {
    if (stream_registered_) cuFileStreamDeregister(stream_.cufile());
    stream_.destroy();
    if (registered_) deregister_buffer(buf_, o);
  }

 private:
  ssize_t run(const Block& b, bool writing) {
    const off_t off = static_cast<off_t>(b.offset);
    if (!stream_.get())
      return writing ? cuFileWrite(lane_->handle, buf_.ptr(), b.length, off, 0)
                     : cuFileRead(lane_->handle, buf_.ptr(), b.length, off, 0);
    size_ = b.length;
    file_off_ = off;
    buf_off_ = 0;
    CUfileError_t e =
        writing ? cuFileWriteAsync(lane_->handle, buf_.ptr(), &size_, &file_off_, &buf_off_,
                                   &done_, stream_.cufile())
                : cuFileReadAsync(lane_->handle, buf_.ptr(), &size_, &file_off_, &buf_off_,
                                  &done_, stream_.cufile());
    if (e.err != CU_FILE_SUCCESS) return -e.err;
    if (!stream_.sync()) return -1;
    return done_;
  }

  Buffer buf_;
  Lane* lane_ = nullptr;
  Stream stream_;
  bool registered_ = false;
  bool stream_registered_ = false;
  size_t size_ = 0;
  off_t file_off_ = 0, buf_off_ = 0;
  ssize_t done_ = 0;
};

}  // namespace

std::unique_ptr<Mover> make_mover(const Options& o) {
  switch (o.xfer) {
    case Xfer::gpu_direct: return std::make_unique<CuFileMover>(io_memory(o));
    case Xfer::cpu_only: return std::make_unique<CuFileMover>(Mem::host);
    case Xfer::cpu_gpu: return std::make_unique<CpuGpuMover>();
    case Xfer::cpu_async_gpu: return std::make_unique<CpuAsyncGpuMover>();
    case Xfer::cpu_cached_gpu: return std::make_unique<CpuGpuMover>();
    case Xfer::gpu_direct_async: return std::make_unique<AsyncMover>();
    case Xfer::gpu_batch:
    case Xfer::gpu_batch_stream: break;  // batch.cpp runs these
  }
  return nullptr;
}

}  // namespace gpufile::cli::benchmark
