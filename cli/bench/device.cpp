#include "cli/bench/device.hpp"

#include <cufile.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli/bench/blocks.hpp"

namespace gpufile::cli::benchmark {

bool Gpu::open(int ordinal) {
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

void Gpu::bind_thread() const {
  if (drv) drv->CtxSetCurrent(ctx);
}

void Gpu::close() {
  if (drv && ctx) drv->DevicePrimaryCtxRelease(dev);
}

bool Stream::create(const Gpu& gpu) {
  drv_ = gpu.drv;
  return !drv_ || drv_->StreamCreate(&stream_, cuda::CU_STREAM_NON_BLOCKING) == cuda::CUDA_SUCCESS;
}

bool Stream::sync() const {
  return !stream_ || drv_->StreamSynchronize(stream_) == cuda::CUDA_SUCCESS;
}

void Stream::destroy() {
  if (stream_) drv_->StreamDestroy(stream_);
  stream_ = nullptr;
}

bool Event::create(const Gpu& gpu) {
  drv_ = gpu.drv;
  return !drv_ || drv_->EventCreate(&event_, cuda::CU_EVENT_DISABLE_TIMING) == cuda::CUDA_SUCCESS;
}

bool Event::record(const Stream& s) {
  if (!event_) return true;
  pending_ = drv_->EventRecord(event_, s.get()) == cuda::CUDA_SUCCESS;
  return pending_;
}

bool Event::wait() {
  if (!pending_) return true;
  pending_ = false;
  return drv_->EventSynchronize(event_) == cuda::CUDA_SUCCESS;
}

void Event::destroy() {
  if (event_) drv_->EventDestroy(event_);
  event_ = nullptr;
  pending_ = false;
}

Mem io_memory(const Options& o) {
  if (o.memory == 2) return Mem::pinned;
  if (o.memory == 3) return Mem::host;
  return Mem::device;
}

bool Buffer::allocate(Mem kind, const Gpu& gpu, uint64_t bytes) {
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

void* Buffer::ptr() const {
  return kind_ == Mem::device ? reinterpret_cast<void*>(dev_) : host_;
}

// A synchronous copy from pageable memory may return before its DMA reached the device
// (it ran on the legacy stream, and only the staging of the source is waited for). Work on
// our non-blocking streams is not ordered after it, so -x 3, 5 and 7 writes of -V blocks
// read stale bytes unless the legacy stream is waited for: seen on an H100.
bool Buffer::put(uint64_t at, const void* src, uint64_t n) const {
  if (kind_ != Mem::device) return std::memcpy(host_ + at, src, n), true;
  return drv_->MemcpyHtoD(dev_ + at, src, n) == cuda::CUDA_SUCCESS &&
         drv_->StreamSynchronize(nullptr) == cuda::CUDA_SUCCESS;
}

bool Buffer::get(uint64_t at, void* dst, uint64_t n) const {
  if (kind_ != Mem::device) return std::memcpy(dst, host_ + at, n), true;
  return drv_->MemcpyDtoH(dst, dev_ + at, n) == cuda::CUDA_SUCCESS;
}

bool Buffer::put_async(uint64_t at, const void* src, uint64_t n, const Stream& s) const {
  if (kind_ != Mem::device) return std::memcpy(host_ + at, src, n), true;
  return drv_->MemcpyHtoDAsync(dev_ + at, src, n, s.get()) == cuda::CUDA_SUCCESS;
}

bool Buffer::get_async(uint64_t at, void* dst, uint64_t n, const Stream& s) const {
  if (kind_ != Mem::device) return std::memcpy(dst, host_ + at, n), true;
  return drv_->MemcpyDtoHAsync(dst, dev_ + at, n, s.get()) == cuda::CUDA_SUCCESS;
}

void Buffer::release() {
  if (kind_ == Mem::device && dev_) drv_->MemFree(dev_);
  if (kind_ == Mem::pinned && host_) drv_->MemFreeHost(host_);
  if (kind_ == Mem::host) std::free(host_);
  dev_ = 0;
  host_ = nullptr;
}

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

}  // namespace gpufile::cli::benchmark
