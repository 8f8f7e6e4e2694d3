#include "exec/gather.hpp"

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "sys/os.hpp"

namespace gpufile::exec {

uint64_t FileRows::rows() const {
  uint64_t n = 1;
  for (uint64_t c : counts) n *= c;
  return n;
}

uint64_t FileRows::row_offset(uint64_t index) const {
  uint64_t off = first;
  for (size_t k = counts.size(); k-- > 0;) {
    off += index % counts[k] * strides[k];
    index /= counts[k];
  }
  return off;
}

uint64_t FileRows::span_end() const {
  uint64_t end = first + run;
  for (size_t k = 0; k < counts.size(); ++k) end += (counts[k] - 1) * strides[k];
  return end;
}

std::string FileRows::problem() const {
  using Wide = unsigned __int128;
  constexpr Wide kLimit = Wide{1} << 63;
  if (run == 0) return "run must be at least 1 byte";
  if (counts.size() != strides.size())
    return "counts has " + std::to_string(counts.size()) + " dimensions and strides " +
           std::to_string(strides.size()) + ": one stride per count";
  Wide end = Wide{first} + run, total = run;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] == 0) return "every count must be at least 1";
    end += Wide{counts[k] - 1} * strides[k];
    total *= counts[k];
    if (end > kLimit || total > kLimit) return "the rows reach past the largest file offset (2^63)";
  }
  return {};
}

namespace {

// Buffered reads of the rows' bytes [from, from + n) (counted row after row) into `dst`,
// continuing short reads. The bytes that landed, fewer where the file ends; or the error.
IoResult read_rows(const Job& job, const FileRows& rows, uint64_t from, uint64_t n, char* dst) {
  constexpr int kMaxRetries = 8;  // EINTR / EAGAIN in a row, as the data path's other reads
  uint64_t done = 0;
  int retries = 0;
  while (done < n) {
    const uint64_t at = from + done;
    const uint64_t in_row = at % rows.run;
    const uint64_t len = std::min(rows.run - in_row, n - done);
    const uint64_t off = rows.row_offset(at / rows.run) + in_row;
    const ssize_t r = sys::os().pread(job.file.fd_buffered, dst + done, len, off);
    if (r == -EINTR || r == -EAGAIN) {
      if (++retries > kMaxRetries) return {0, Error::sys(static_cast<int>(-r))};
      continue;
    }
    if (r < 0) return {0, Error::sys(static_cast<int>(-r))};
    if (r == 0) break;  // the file ends here
    retries = 0;
    done += static_cast<uint64_t>(r);
  }
  return {done, Error::none()};
}

// Pinned staging for one gather: two of the pool's buffers, or one pinned for the call when the
// pool lends none (many calls at once); either goes back when the gather ends.
class GatherStaging {
 public:
  explicit GatherStaging(StagingPool& pool) : lease_(pool, StagingLease::kMaxBuffers), bytes_(pool.bytes()) {
    for (unsigned i = 0; i < lease_.count(); ++i) bufs_[count_++] = lease_.buffer(i);
    if (count_ > 0) return;
    void* mem = nullptr;
    if (cuda::alloc_pinned(bytes_, &mem)) return;
    own_.mem = static_cast<char*>(mem);
    bufs_[count_++] = &own_;
  }
  ~GatherStaging() {
    if (own_.mem == nullptr) return;
    own_.streams.clear();
    cuda::free_pinned(own_.mem, bytes_);
  }
  GatherStaging(const GatherStaging&) = delete;
  GatherStaging& operator=(const GatherStaging&) = delete;

  unsigned count() const { return count_; }
  uint64_t bytes() const { return bytes_; }
  StagingPool::Buffer& buffer(unsigned i) { return *bufs_[i]; }

 private:
  StagingLease lease_;
  uint64_t bytes_;
  StagingPool::Buffer own_;
  StagingPool::Buffer* bufs_[StagingLease::kMaxBuffers] = {};
  unsigned count_ = 0;
};

// The rows into GPU memory: each staging buffer in turn is filled by the kernel, then copied on
// its own stream while the next one fills.
IoResult gather_to_gpu(const Job& job, const FileRows& rows, StagingPool& pool) {
  // Pinning staging, when the pool makes a buffer or none is free, needs the context too.
  cuda::ScopedContext current(job.mem.context);
  GatherStaging staging(pool);
  if (staging.count() == 0 || staging.bytes() == 0) return {0, Error::of(Errc::no_memory)};
  const cuda::Driver* d = cuda::driver();
  cuda::CUstream streams[StagingLease::kMaxBuffers] = {};
  bool busy[StagingLease::kMaxBuffers] = {};
  auto wait = [&](unsigned k) {
    busy[k] = false;
    if (streams[k] == nullptr) return Error::none();
    const cuda::CUresult r = d->StreamSynchronize(streams[k]);
    return r == cuda::CUDA_SUCCESS ? Error::none() : Error::cu(r);
  };
  IoResult out;
  unsigned k = 0;
  while (out.bytes < job.len && out.ok()) {
    k = (k + 1) % staging.count();
    if (busy[k]) out.error = wait(k);
    if (!out.ok()) break;
    StagingPool::Buffer& buf = staging.buffer(k);
    const uint64_t want = std::min(staging.bytes(), job.len - out.bytes);
    const IoResult got = read_rows(job, rows, out.bytes, want, buf.mem);
    if (!got.ok()) out.error = got.error;
    if (!got.ok() || got.bytes == 0) break;
    const cuda::CUdeviceptr dst = job.addr + out.bytes;
    streams[k] = buf.stream(job.mem.context);
    const cuda::CUresult r = streams[k] != nullptr ? d->MemcpyHtoDAsync(dst, buf.mem, got.bytes, streams[k])
                                                   : d->MemcpyHtoD(dst, buf.mem, got.bytes);
    busy[k] = true;  // a failed asynchronous copy may still have been queued: waited for below
    if (r != cuda::CUDA_SUCCESS) out.error = Error::cu(r);
    else out.bytes += got.bytes;
    if (got.bytes < want) break;  // the file ended
  }
  for (unsigned i = 0; i < staging.count(); ++i)
    if (busy[i])
      if (Error e = wait(i); e && out.ok()) out.error = e;
  if (!out.ok()) out.bytes = 0;
  return out;
}

}  // namespace

IoResult gather_rows(const Job& job, const FileRows& rows, StagingPool& staging) {
  if (job.len == 0) return {};
  if (rows.bytes() != job.len) return {0, Error::of(Errc::invalid_argument)};
  if (!job.staged()) return read_rows(job, rows, 0, job.len, reinterpret_cast<char*>(job.addr));
  return gather_to_gpu(job, rows, staging);
}

}  // namespace gpufile::exec
