// Remote reads on the runtime: where the bytes of each ranged GET land. Host memory takes them
// in place; GPU memory through buffers of the session's `remote` staging pool, each part copied
// to the GPU on its buffer's stream as soon as it landed, while the next parts still arrive.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda/memory.hpp"
#include "exec/remote_pool.hpp"
#include "exec/runtime.hpp"
#include "exec/session.hpp"
#include "io/remote/object.hpp"

namespace gpufile {
namespace {

class HostSink final : public remote::PartSink {
 public:
  HostSink(char* dst, uint64_t base) : dst_(dst), base_(base) {}
  char* begin(size_t, const remote::Part& p) override { return dst_ + (p.offset - base_); }
  remote::Failure landed(size_t, const remote::Part&, char*) override { return {}; }
  void dropped(size_t, char*) override {}
  remote::Failure finish() override { return {}; }

 private:
  char* dst_;
  uint64_t base_;
};

// Staging buffers lent for one read; each lands one part at a time, then copies it to the GPU.
class DeviceSink final : public remote::PartSink {
 public:
  DeviceSink(exec::StagingPool& pool, const cuda::MemInfo& mem, cuda::CUdeviceptr dst, uint64_t base)
      : pool_(pool), mem_(mem), dst_(dst), base_(base) {}
  ~DeviceSink() override {
    std::vector<exec::StagingPool::Buffer*> all;
    for (const Held& h : held_) all.push_back(h.buf);
    pool_.give(all.data(), static_cast<unsigned>(all.size()));
  }

  // Up to `want` buffers. While other reads hold them all it waits for one to come back (reads
  // end, within their retries and timeouts); with none made at all, pinning failed.
  remote::Failure lease(unsigned want) {
    std::vector<exec::StagingPool::Buffer*> got(want);
    unsigned n = 0;
    while ((n = pool_.take(got.data(), want)) == 0) {
      if (pool_.made() == 0)
        return {ENOMEM, "no pinned staging memory for a remote read into GPU memory"};
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (unsigned i = 0; i < n; ++i) {
      held_.push_back({got[i], nullptr});
      free_.push_back(i);
    }
    return {};
  }

  char* begin(size_t, const remote::Part&) override {
    if (free_.empty() && !copying_.empty()) recycle_oldest();
    if (free_.empty()) return nullptr;
    const unsigned i = free_.front();
    free_.pop_front();
    return held_[i].buf->mem;
  }

  remote::Failure landed(size_t, const remote::Part& p, char* mem) override {
    const unsigned i = index_of(mem);
    Held& h = held_[i];
    const cuda::Driver* d = cuda::driver();
    const cuda::CUdeviceptr to = dst_ + (p.offset - base_);
    h.stream = h.buf->stream(mem_.context);
    cuda::CUresult r = h.stream ? d->MemcpyHtoDAsync(to, mem, p.length, h.stream)
                                : d->MemcpyHtoD(to, mem, p.length);
    if (r != cuda::CUDA_SUCCESS) {
      if (h.stream) d->StreamSynchronize(h.stream);  // nothing may still read the buffer
      free_.push_back(i);
      return {EIO, "copy to the GPU failed: " + cuda::describe(r)};
    }
    (h.stream ? copying_ : free_).push_back(i);
    return {};
  }

  void dropped(size_t, char* mem) override { free_.push_back(index_of(mem)); }

  remote::Failure finish() override {
    while (!copying_.empty()) recycle_oldest();
    return copy_failure_;
  }

 private:
  struct Held {
    exec::StagingPool::Buffer* buf;
    cuda::CUstream stream;
  };

  unsigned index_of(const char* mem) const {
    unsigned i = 0;
    while (held_[i].buf->mem != mem) ++i;
    return i;
  }

  void recycle_oldest() {
    const unsigned i = copying_.front();
    copying_.pop_front();
    if (cuda::CUresult r = cuda::driver()->StreamSynchronize(held_[i].stream);
        r != cuda::CUDA_SUCCESS && copy_failure_.ok())
      copy_failure_ = {EIO, "copy to the GPU failed: " + cuda::describe(r)};
    free_.push_back(i);
  }

  exec::StagingPool& pool_;
  const cuda::MemInfo& mem_;
  const cuda::CUdeviceptr dst_;
  const uint64_t base_;
  std::vector<Held> held_;
  std::deque<unsigned> free_, copying_;
  remote::Failure copy_failure_;
};

// A read's bytes are received by several threads, each driving its own share of the transfers
// in flight on a multi handle of its own, so that receiving and copying grow with the transfers:
// one transfer over loopback HTTP ran at 2.5-3.3 GiB/s on the H200 machine, 16 in flight on 8
// threads at 13.5-14.4, and on 16 threads (one per transfer, the default)
// 1.07-1.63x what 8 threads reached on the same H100 (docs/performance.md): each thread both
// receives and copies every byte of its transfers. The threads are the remote pool's
// (exec/remote_pool.hpp): one per `remote_transfers_per_thread` transfers in flight, as many
// as it has free.

// The read [offset, offset+n) cut into `lanes` runs of whole parts, as even as parts allow.
std::vector<std::pair<uint64_t, uint64_t>> lane_runs(uint64_t offset, uint64_t n, uint64_t part,
                                                     unsigned lanes) {
  const uint64_t parts = (n + part - 1) / part;
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  uint64_t at = 0;
  for (unsigned k = 0; k < lanes && at < n; ++k) {
    const uint64_t take = (parts * (k + 1) / lanes - parts * k / lanes) * part;
    const uint64_t len = std::min(take, n - at);
    if (len > 0) runs.emplace_back(offset + at, len);
    at += len;
  }
  return runs;
}

// Runs lane(k) for every k < lanes and returns when all ended. Lanes lanes-1 down to 1 are
// offered to the remote pool, which starts those it has free threads for; the calling thread
// runs the rest, lanes [0, own), with own_lanes(own). So the threads stay bounded by the pool
// however many reads are in flight, and a read on a pool thread never waits for queued work.
void share_lanes(size_t lanes, const std::function<void(size_t)>& lane,
                 const std::function<void(size_t)>& own_lanes) {
  struct Running {
    std::mutex mu;
    std::condition_variable ended;
    size_t count = 0;
  } running;
  std::vector<std::function<void()>> offered;
  for (size_t k = lanes - 1; k >= 1; --k)
    offered.push_back([&running, &lane, k] {
      lane(k);
      std::lock_guard lock(running.mu);
      if (--running.count == 0) running.ended.notify_all();
    });
  running.count = offered.size();
  const size_t started = exec::RemotePool::instance().start_now(offered);
  {
    std::lock_guard lock(running.mu);
    running.count -= offered.size() - started;
  }
  own_lanes(lanes - started);
  std::unique_lock lock(running.mu);
  running.ended.wait(lock, [&running] { return running.count == 0; });
}

// The failure a read reports: the first that is not another lane's stop (ECANCELED).
remote::Failure first_cause(std::vector<remote::Failure>& failures) {
  remote::Failure* first = nullptr;
  for (remote::Failure& f : failures) {
    if (f.ok()) continue;
    if (f.err != ECANCELED) return std::move(f);
    if (first == nullptr) first = &f;
  }
  return first ? std::move(*first) : remote::Failure{};
}

remote::Options options_of(const Settings& s) {
  remote::Options o;
  o.part_bytes = s.remote_part_kb * 1024;
  o.concurrency = static_cast<unsigned>(s.remote_concurrency);
  o.per_thread = static_cast<unsigned>(s.remote_transfers_per_thread);
  o.retries = static_cast<unsigned>(s.remote_retries);
  o.backoff_ms = s.remote_backoff_ms;
  o.timeout_s = static_cast<unsigned>(s.remote_timeout_s);
  return o;
}

}  // namespace

Error Runtime::remote_options(remote::Options* out) {
  if (Error e = ensure_open()) return e;
  *out = options_of(settings());
  return Error::none();
}

Error Runtime::remote_session(std::shared_ptr<Session>* out) {
  if (Error e = ensure_open()) return e;
  *out = session();
  return *out ? Error::none() : Error::of(Errc::driver_not_open);
}

IoResult Runtime::read_remote(remote::Object& obj, void* dst, uint64_t size, uint64_t offset,
                              remote::Failure* why) {
  auto fail = [why](int err, std::string message) {
    *why = {err, std::move(message)};
    return IoResult{0, Error::sys(err)};
  };
  if (Error e = ensure_open()) return {0, e};
  std::shared_ptr<Session> s = session();
  if (!s) return {0, Error::of(Errc::driver_not_open)};
  s->inflight.fetch_add(1, std::memory_order_acq_rel);  // a driver close waits for this read
  struct Admitted {
    Session& s;
    ~Admitted() { drop(s.inflight); }
  } admitted{*s};

  const uint64_t n = offset >= obj.size() ? 0 : std::min(size, obj.size() - offset);
  if (n == 0) return {0, Error::none()};
  if (dst == nullptr) return {0, Error::of(Errc::invalid_argument)};
  cuda::MemInfo mem;
  if (Error e = cuda::classify(dst, &mem)) return {0, e};
  const remote::Options o = options_of(s->settings);
  const auto at = reinterpret_cast<uint64_t>(dst);
  if (mem.needs_staging() && mem.range_size != 0 && at + n > mem.range_start + mem.range_size)
    return {0, Error::of(Errc::pointer_range)};
  const unsigned lanes = exec::remote_threads_for(o);
  exec::RemotePool::instance().allow(lanes);
  const auto runs = lane_runs(offset, n, std::max<uint64_t>(1, o.part_bytes), lanes);
  const unsigned per_lane = std::max(1u, o.concurrency / static_cast<unsigned>(runs.size()));
  std::atomic<bool> stop{false};  // a failed lane ends the others
  // Bytes [first, first+len) land at dst + (first - offset), `concurrency` transfers in flight.
  auto fetch = [&](uint64_t first, uint64_t len, unsigned concurrency) -> remote::Failure {
    remote::Options lane = o;
    lane.concurrency = concurrency;
    remote::Failure f;
    if (!mem.needs_staging()) {
      HostSink sink(static_cast<char*>(dst), offset);
      f = obj.fetch(first, len, lane, sink, &stop);
    } else {
      cuda::ScopedContext ctx(mem.context);
      DeviceSink sink(s->remote, mem, at, offset);
      f = sink.lease(lane.concurrency);
      if (f.ok()) f = obj.fetch(first, len, lane, sink, &stop);
    }
    if (!f.ok()) stop.store(true, std::memory_order_release);
    return f;
  };
  // Every lane ends (its transfers done or abandoned, its copies waited for) before the call
  // returns: nothing writes into the caller's memory after that.
  std::vector<remote::Failure> failures(runs.size());
  share_lanes(
      runs.size(),
      [&](size_t k) { failures[k] = fetch(runs[k].first, runs[k].second, per_lane); },
      [&](size_t own) {  // lanes [0, own) are adjacent: one run
        const uint64_t end = runs[own - 1].first + runs[own - 1].second;
        failures[0] = fetch(runs[0].first, end - runs[0].first, per_lane * static_cast<unsigned>(own));
      });
  if (remote::Failure f = first_cause(failures); !f.ok()) return fail(f.err, std::move(f.message));
  return {n, Error::none()};
}

}  // namespace gpufile
