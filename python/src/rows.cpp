#include "rows.hpp"

#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "buffer.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "errors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace gpufile::py {
namespace {

// (address, bytes, CUDA device ordinal or -1 for host memory) of a writable buffer; the
// producer's stream has been waited for (Buffer::acquire). The caller keeps `obj` alive.
nb::tuple memory_of(nb::handle obj) {
  auto b = Buffer::acquire(obj, true);
  cuda::MemInfo info;
  if (Error e = cuda::classify(reinterpret_cast<const void*>(b->addr()), &info))
    raise(e, "cuPointerGetAttributes");
  return nb::make_tuple(b->addr(), b->nbytes(), info.needs_staging() ? info.device : -1);
}

int max_pitch(const cuda::Driver& d, int device) {
  int value = 0;
  cuda::CUdevice dev = 0;
  if (d.DeviceGet(&dev, device < 0 ? 0 : device) != cuda::CUDA_SUCCESS ||
      d.DeviceGetAttribute(&value, cuda::CU_DEVICE_ATTRIBUTE_MAX_PITCH, dev) != cuda::CUDA_SUCCESS ||
      value <= 0)
    return 1 << 20;  // unknown: a pitch every CUDA device takes
  return value;
}

// Queues the rows of one innermost run of `height` rows as one pitched copy, or row by row
// when a pitch is beyond what the device takes (one 2-D copy of one row each).
cuda::CUresult queue_rows(const cuda::Driver& d, cuda::CUstream stream, uint64_t dst, uint64_t src,
                          uint64_t width, uint64_t height, int64_t dpitch, int64_t spitch,
                          int64_t limit) {
  cuda::CUDA_MEMCPY2D c;
  c.srcMemoryType = c.dstMemoryType = cuda::CU_MEMORYTYPE_UNIFIED;
  c.WidthInBytes = width;
  const bool pitched = height == 1 || (dpitch >= static_cast<int64_t>(width) && dpitch <= limit &&
                                       spitch >= static_cast<int64_t>(width) && spitch <= limit);
  const uint64_t copies = pitched ? 1 : height;
  for (uint64_t i = 0; i < copies; ++i) {
    c.dstDevice = dst + i * dpitch;
    c.srcDevice = src + i * spitch;
    c.Height = pitched ? height : 1;
    c.dstPitch = pitched && height > 1 ? dpitch : width;
    c.srcPitch = pitched && height > 1 ? spitch : width;
    if (cuda::CUresult r = d.Memcpy2DAsync(&c, stream); r != cuda::CUDA_SUCCESS) return r;
  }
  return cuda::CUDA_SUCCESS;
}

// Places rows between CUDA-reachable memory (device, managed or host) on a stream of its own,
// in the context of the destination's memory. copy() queues prod(counts) rows of `row_bytes`,
// the row at index (i0, ..., ik) being at address + sum(i * strides) on each side: the
// innermost index as one pitched copy (cuMemcpy2DAsync), the outer ones looped. Each copy
// returns a ticket; wait(ticket) returns once that copy and every earlier one landed (a
// staging buffer is free again), finish() once all did. For placing chunks of an HDF5 dataset,
// read into device staging, into their rows of a GPU array without a trip through host memory.
// The stream is a blocking one: ordered after work on the legacy default stream, where a
// synchronous copy from pageable memory (DeviceBuffer.copy_from_host of a fill block) may still
// be landing when it returned; gpufile's workers use non-blocking streams, so their reads into
// other staging buffers go on meanwhile.
class RowCopier {
 public:
  explicit RowCopier(uint64_t dst) : ctx_(reinterpret_cast<const void*>(dst)) {
    const cuda::Driver* d = cuda::driver();
    if (d == nullptr) raise_message("no CUDA driver: " + cuda::why_no_driver());
    d_ = d;
    cuda::ScopedContext scope(ctx_.get());
    cuda::MemInfo info;
    limit_ = cuda::classify(reinterpret_cast<const void*>(dst), &info) ? 1 << 20
                                                                        : max_pitch(*d, info.device);
    if (cuda::CUresult r = d->StreamCreate(&stream_, 0); r != cuda::CUDA_SUCCESS)
      raise(Error::cu(r), "cuStreamCreate");
  }
  ~RowCopier() {
    nb::gil_scoped_release unlocked;
    cuda::ScopedContext scope(ctx_.get());
    d_->StreamSynchronize(stream_);  // never leave a copy running into a caller's memory
    for (auto& [ticket, event] : events_) d_->EventDestroy(event);
    d_->StreamDestroy(stream_);
  }
  RowCopier(const RowCopier&) = delete;
  RowCopier& operator=(const RowCopier&) = delete;

  uint64_t copy(uint64_t dst, uint64_t src, uint64_t row_bytes, const std::vector<uint64_t>& counts,
                const std::vector<int64_t>& dst_strides, const std::vector<int64_t>& src_strides) {
    if (counts.empty() || counts.size() != dst_strides.size() || counts.size() != src_strides.size())
      throw nb::value_error("counts, dst_strides and src_strides need one entry per dimension");
    for (size_t k = 0; k < counts.size(); ++k)
      if (dst_strides[k] < 0 || src_strides[k] < 0)
        throw nb::value_error("strides must not be negative");
    uint64_t rows = 1;
    for (uint64_t n : counts) rows *= n;
    cuda::CUresult r = cuda::CUDA_SUCCESS;
    const char* what = "cuMemcpy2DAsync";
    {
      nb::gil_scoped_release unlocked;
      cuda::ScopedContext scope(ctx_.get());
      if (rows != 0 && row_bytes != 0) r = queue(dst, src, row_bytes, counts, dst_strides, src_strides);
      cuda::CUevent event = nullptr;
      if (r == cuda::CUDA_SUCCESS) {
        what = "cuEventRecord";
        r = d_->EventCreate(&event, cuda::CU_EVENT_DISABLE_TIMING);
        if (r == cuda::CUDA_SUCCESS) r = d_->EventRecord(event, stream_);
        if (r == cuda::CUDA_SUCCESS) events_.emplace_back(next_ticket_, event);
        else if (event != nullptr) d_->EventDestroy(event);
      }
      if (r != cuda::CUDA_SUCCESS) d_->StreamSynchronize(stream_);  // what was queued lands first
    }
    if (r != cuda::CUDA_SUCCESS) raise(Error::cu(r), what);
    return next_ticket_++;
  }

  void wait(uint64_t ticket) {
    cuda::CUresult r = cuda::CUDA_SUCCESS;
    {
      nb::gil_scoped_release unlocked;
      cuda::ScopedContext scope(ctx_.get());
      // Events complete in stream order: the newest one up to `ticket` covers the older ones.
      size_t upto = 0;
      while (upto < events_.size() && events_[upto].first <= ticket) ++upto;
      if (upto > 0) r = d_->EventSynchronize(events_[upto - 1].second);
      for (size_t i = 0; i < upto; ++i) d_->EventDestroy(events_[i].second);
      events_.erase(events_.begin(), events_.begin() + upto);
    }
    if (r != cuda::CUDA_SUCCESS) raise(Error::cu(r), "cuEventSynchronize");
  }

  void finish() {
    cuda::CUresult r;
    {
      nb::gil_scoped_release unlocked;
      cuda::ScopedContext scope(ctx_.get());
      r = d_->StreamSynchronize(stream_);
      if (r == cuda::CUDA_SUCCESS) {  // every event passed: none is needed any more
        for (auto& [ticket, event] : events_) d_->EventDestroy(event);
        events_.clear();
      }
    }
    if (r != cuda::CUDA_SUCCESS) raise(Error::cu(r), "cuStreamSynchronize");
  }

 private:
  cuda::CUresult queue(uint64_t dst, uint64_t src, uint64_t row_bytes,
                       const std::vector<uint64_t>& counts, const std::vector<int64_t>& dst_strides,
                       const std::vector<int64_t>& src_strides) {
    const size_t inner = counts.size() - 1;
    uint64_t outer_rows = 1;
    for (size_t k = 0; k < inner; ++k) outer_rows *= counts[k];
    std::vector<uint64_t> index(inner, 0);
    for (uint64_t n = 0; n < outer_rows; ++n) {
      uint64_t dst_at = dst, src_at = src;
      for (size_t k = 0; k < inner; ++k) {
        dst_at += index[k] * dst_strides[k];
        src_at += index[k] * src_strides[k];
      }
      if (cuda::CUresult r = queue_rows(*d_, stream_, dst_at, src_at, row_bytes, counts[inner],
                                        dst_strides[inner], src_strides[inner], limit_);
          r != cuda::CUDA_SUCCESS)
        return r;
      for (size_t k = inner; k-- > 0;) {  // odometer over the outer indices
        if (++index[k] < counts[k]) break;
        index[k] = 0;
      }
    }
    return cuda::CUDA_SUCCESS;
  }

  const cuda::Driver* d_ = nullptr;
  cuda::MemoryContext ctx_;
  cuda::CUstream stream_ = nullptr;
  int limit_ = 1 << 20;
  uint64_t next_ticket_ = 0;
  std::vector<std::pair<uint64_t, cuda::CUevent>> events_;  // recorded after each copy, oldest first
};

}  // namespace

void register_rows(nb::module_ m) {
  m.def("_memory_of", &memory_of, "buf"_a,
        "(address, bytes, CUDA device or -1 for host memory) of a writable, contiguous buffer.");
  nb::class_<RowCopier>(m, "_RowCopier",
                        "Places rows between CUDA-reachable memory on a stream of its own "
                        "(cuMemcpy2DAsync), in the context of the memory at `dst`.")
      .def(nb::init<uint64_t>(), "dst"_a)
      .def("copy", &RowCopier::copy, "dst"_a, "src"_a, "row_bytes"_a, "counts"_a, "dst_strides"_a,
           "src_strides"_a,
           "Queues prod(counts) rows of row_bytes, placed by byte strides on each side; returns "
           "a ticket for wait().")
      .def("wait", &RowCopier::wait, "ticket"_a,
           "Returns once the copy of `ticket` and every earlier one landed.")
      .def("finish", &RowCopier::finish, "Returns once every copy landed.");
}

}  // namespace gpufile::py
