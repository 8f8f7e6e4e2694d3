#include "exec/worker.hpp"

#include <cerrno>

#include "core/align.hpp"
#include "cuda/memory.hpp"

namespace gpufile::exec {
namespace {

constexpr unsigned kSegsPerSlot = 4;   // tag = slot * kSegsPerSlot + segment

bool is_read(const Job& j) { return j.kind == sys::IoKind::read; }

}  // namespace

Worker::Worker(Executor& owner, const ExecutorConfig& cfg) : owner_(owner), cfg_(cfg) {}

Worker::~Worker() {
  if (const cuda::Driver* d = cuda::driver()) {
    for (ContextRes& r : contexts_) {
      for (cuda::CUevent e : r.events) d->EventDestroy(e);
      if (r.stream) d->StreamDestroy(r.stream);
    }
  }
  engine_.reset();  // unregisters the slabs before they are freed
  cuda::free_pinned(slabs_, slabs_bytes_);
}

Error Worker::init(std::string* why) {
  slots_.resize(cfg_.slabs_per_worker);
  copy_order_.assign(slots_.size(), 0);
  slabs_bytes_ = cfg_.slab_bytes * slots_.size();
  void* mem = nullptr;
  if (Error e = cuda::alloc_pinned(slabs_bytes_, &mem)) return e;
  slabs_ = static_cast<char*>(mem);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].slab = slabs_ + i * cfg_.slab_bytes;
  unsigned depth = std::max<unsigned>(cfg_.ring_depth, slots_.size() * kSegsPerSlot);
  engine_ = io::make_engine(cfg_.engine, depth, why);
  if (!engine_) return Error::of(Errc::io_not_supported);
  iovec iov{slabs_, slabs_bytes_};
  registered_ = engine_->register_buffers(&iov, 1);
  return Error::none();
}

void Worker::run() {
  for (;;) {
    // Here the worker holds no lock and is in no call: where it parks while a fork is under way
    // (executor.hpp). One atomic load per turn.
    owner_.safe_point();
    bool progress = fill_free_slots();
    engine_->submit();
    progress |= reap(false) > 0;
    progress |= poll_copies();
    engine_->submit();
    if (progress) continue;
    if (engine_->in_flight() > 0) {
      reap(true);
      continue;
    }
    if (wait_oldest_copy()) continue;
    if (!owner_.wait_for_work()) return;
  }
}

// One new piece per turn of the loop: a page-cache read completes inside the submit that
// follows (io_uring copies it there), so a worker taking two pieces at once would copy them one
// after the other while another woken worker finds nothing left. The next turn, right after
// the submit, takes the next one.
bool Worker::fill_free_slots() {
  for (unsigned i = 0; i < slots_.size(); ++i) {
    if (slots_[i].stage != Stage::free) continue;
    Chunk c;
    if (!claim_next(&c)) return false;
    start(i, c);
    return true;
  }
  return false;
}

// The next piece of a job this worker already holds a piece of (alive while that piece is
// unreported: no lock needed), else of the oldest listed job.
bool Worker::claim_next(Chunk* out) {
  for (const Slot& s : slots_)
    if (s.stage != Stage::free && s.chunk.job->claim(out)) return true;
  return owner_.claim_listed(out);
}

void Worker::start(unsigned i, const Chunk& c) {
  Slot& s = slots_[i];
  s.chunk = c;
  s.err = Error::none();
  s.got = 0;
  Job& job = *c.job;
  if (job.canceled()) {
    s.stage = Stage::io;  // complete() frees it
    complete(i, 0, Error::of(Errc::canceled));
    return;
  }
  s.plan = plan_chunk(job, c.off, c.len, s.slab);
  if (job.staged() && !is_read(job)) {
    s.stage = Stage::copy_to_host;
    if (Error e = start_copy(i, false, c.len)) complete(i, 0, e);
    return;
  }
  issue_all(i);
}

void Worker::issue_all(unsigned i) {
  Slot& s = slots_[i];
  s.stage = Stage::io;
  s.segs_pending = s.plan.count;
  if (s.plan.count == 0) {
    io_finished(i);
    return;
  }
  for (int k = 0; k < s.plan.count; ++k) issue(i, k);
}

void Worker::issue(unsigned i, int k) {
  Slot& s = slots_[i];
  Segment& seg = s.plan.seg[k];
  io::Op op;
  op.kind = s.chunk.job->kind;
  op.fd = seg.fd;
  op.buf = seg.mem + seg.done;
  op.len = static_cast<uint32_t>(seg.len - seg.done);
  op.off = seg.file_off + seg.done;
  op.tag = i * kSegsPerSlot + k;
  if (std::mutex* turn = s.chunk.job->file.write_lock.get(); turn && op.kind == sys::IoKind::write)
    return write_in_turn(op, *turn);
  const bool in_slab = seg.mem >= slabs_ && seg.mem < slabs_ + slabs_bytes_;
  op.buf_index = registered_ && in_slab ? 0 : -1;
  if (!engine_->queue(op)) {
    // The ring is sized for every segment of every slot, so this means the engine broke.
    on_io(op.tag, -EBUSY);
  }
}

void Worker::write_in_turn(const io::Op& op, std::mutex& turn) {
  on_io(op.tag, static_cast<int>(pwrite_in_turn(turn, op.fd, op.buf, op.len, op.off)));
}

unsigned Worker::reap(bool wait) {
  io::Completion done[64];
  unsigned n = engine_->reap(done, 64, wait);
  for (unsigned k = 0; k < n; ++k) on_io(done[k].tag, done[k].res);
  return n;
}

void Worker::on_io(uint64_t tag, int res) {
  unsigned i = static_cast<unsigned>(tag / kSegsPerSlot);
  int k = static_cast<int>(tag % kSegsPerSlot);
  Slot& s = slots_[i];
  Error err;
  switch (apply_result(*s.chunk.job, s.plan.seg[k], res, &err)) {
    case SegmentNext::again: return issue(i, k);
    case SegmentNext::failed:
      if (s.err.ok()) s.err = err;
      break;
    case SegmentNext::finished: break;
  }
  if (--s.segs_pending == 0) io_finished(i);
}

void Worker::io_finished(unsigned i) {
  Slot& s = slots_[i];
  if (s.err) return complete(i, 0, s.err);
  const Job& job = *s.chunk.job;
  uint64_t got = contiguous_bytes(s.plan, s.chunk.off, s.chunk.len);
  if (!is_read(job) && got < s.chunk.len) return complete(i, 0, Error::sys(EIO));
  if (job.staged() && is_read(job) && got > 0) {
    s.got = got;
    s.stage = Stage::copy_to_device;
    if (Error e = start_copy(i, true, got)) complete(i, 0, e);
    return;
  }
  complete(i, got, Error::none());
}

Worker::ContextRes* Worker::context_res(cuda::CUcontext ctx, Error* err) {
  const cuda::Driver* d = cuda::driver();
  if (ctx != current_ctx_) {
    if (cuda::CUresult r = d->CtxSetCurrent(ctx); r != cuda::CUDA_SUCCESS) {
      *err = Error::cu(r);
      return nullptr;
    }
    current_ctx_ = ctx;
  }
  for (ContextRes& r : contexts_)
    if (r.ctx == ctx) return &r;
  ContextRes res;
  res.ctx = ctx;
  // Non-blocking: a stream op of cuFileReadAsync on the legacy default stream waits for this
  // worker's copies, so they must not wait for the legacy stream as a whole. A synchronous
  // call's copies wait for what was queued there before the call (Job::after) instead.
  cuda::CUresult r = d->StreamCreate(&res.stream, cuda::CU_STREAM_NON_BLOCKING);
  for (size_t k = 0; r == cuda::CUDA_SUCCESS && k < slots_.size(); ++k) {
    cuda::CUevent e = nullptr;
    r = d->EventCreate(&e, cuda::CU_EVENT_DISABLE_TIMING);
    if (r == cuda::CUDA_SUCCESS) res.events.push_back(e);
  }
  if (r != cuda::CUDA_SUCCESS) {
    for (cuda::CUevent e : res.events) d->EventDestroy(e);
    if (res.stream) d->StreamDestroy(res.stream);
    *err = Error::cu(r);
    return nullptr;
  }
  contexts_.push_back(std::move(res));
  return &contexts_.back();
}

Error Worker::start_copy(unsigned i, bool to_device, uint64_t bytes) {
  Slot& s = slots_[i];
  const Job& job = *s.chunk.job;
  Error err;
  ContextRes* res = context_res(job.mem.context, &err);
  if (res == nullptr) return err;
  const cuda::Driver* d = cuda::driver();
  char* host = s.slab + (s.chunk.off - s.plan.base);
  cuda::CUdeviceptr dev = job.addr + (s.chunk.off - job.file_off);
  if (job.after != nullptr)
    if (cuda::CUresult r = d->StreamWaitEvent(res->stream, job.after, 0); r != cuda::CUDA_SUCCESS)
      return Error::cu(r);
  cuda::CUresult r = to_device ? d->MemcpyHtoDAsync(dev, host, bytes, res->stream)
                               : d->MemcpyDtoHAsync(host, dev, bytes, res->stream);
  if (r == cuda::CUDA_SUCCESS) r = d->EventRecord(res->events[i], res->stream);
  if (r != cuda::CUDA_SUCCESS) {
    // The copy may have been queued before EventRecord failed: let it drain before the slab
    // is reused.
    d->StreamSynchronize(res->stream);
    return Error::cu(r);
  }
  copy_order_[i] = ++copy_seq_;
  return Error::none();
}

bool Worker::poll_copies() {
  bool any = false;
  for (unsigned i = 0; i < slots_.size(); ++i) {
    Stage st = slots_[i].stage;
    if (st != Stage::copy_to_device && st != Stage::copy_to_host) continue;
    ContextRes* res = nullptr;
    for (ContextRes& r : contexts_)
      if (r.ctx == slots_[i].chunk.job->mem.context) res = &r;
    cuda::CUresult r = cuda::driver()->EventQuery(res->events[i]);
    if (r == cuda::CUDA_ERROR_NOT_READY) continue;
    copy_finished(i, r);
    any = true;
  }
  return any;
}

bool Worker::wait_oldest_copy() {
  int oldest = -1;
  for (unsigned i = 0; i < slots_.size(); ++i) {
    Stage st = slots_[i].stage;
    if (st != Stage::copy_to_device && st != Stage::copy_to_host) continue;
    if (oldest < 0 || copy_order_[i] < copy_order_[oldest]) oldest = static_cast<int>(i);
  }
  if (oldest < 0) return false;
  const Job& job = *slots_[oldest].chunk.job;
  for (ContextRes& r : contexts_) {
    if (r.ctx == job.mem.context) {
      copy_finished(oldest, cuda::driver()->EventSynchronize(r.events[oldest]));
      return true;
    }
  }
  return false;
}

void Worker::copy_finished(unsigned i, cuda::CUresult r) {
  Slot& s = slots_[i];
  if (r != cuda::CUDA_SUCCESS) return complete(i, 0, Error::cu(r));
  if (s.stage == Stage::copy_to_host) return issue_all(i);
  complete(i, s.got, Error::none());
}

void Worker::complete(unsigned i, uint64_t got, Error err) {
  Slot& s = slots_[i];
  Chunk c = s.chunk;
  s.stage = Stage::free;
  s.chunk = Chunk{};
  c.job->chunk_done(c.off, c.len, got, err);
}

}  // namespace gpufile::exec
