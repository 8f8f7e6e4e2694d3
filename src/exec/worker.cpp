#include "exec/worker.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/align.hpp"
#include "core/log.hpp"
#include "cuda/memory.hpp"
#include "sys/os.hpp"

namespace gpufile::exec {
namespace {

constexpr unsigned kSegsPerPiece = 4;  // tag = (slot * kMaxPack + piece) * kSegsPerPiece + seg

bool is_read(const Job& j) { return j.kind == sys::IoKind::read; }

// Slab bytes a piece takes: its blocks, widened to the page grid (a DIO alignment staging
// supports is at most a page).
uint64_t slab_bytes_for(const Chunk& c) {
  constexpr uint64_t kPage = 4096;
  return align_up(c.off + c.len, kPage) - align_down(c.off, kPage);
}

}  // namespace

Worker::Worker(Executor& owner, const ExecutorConfig& cfg, const WorkerGroup& group)
    : owner_(owner), cfg_(cfg), node_(group.node), cpus_(group.cpus), near_gpus_(group.gpus) {}

void Worker::pin() {
  if (cpus_.empty()) return;
  const int r = sys::os().set_thread_affinity(cpus_.data(), cpus_.size());
  pin_result_.store(r, std::memory_order_release);
  GPUFILE_LOG(r == 0 ? LogLevel::info : LogLevel::warn, "worker near NUMA node %d: %s%s, staging on node %s",
              node_, r == 0 ? "pinned to CPUs " : "not pinned: ",
              r == 0 ? cpu_list_text(cpus_).c_str() : std::strerror(-r),
              staging_node_ >= 0 ? std::to_string(staging_node_).c_str() : "unknown");
}

WorkerPlace Worker::place() const {
  WorkerPlace p;
  p.node = node_;
  const int pinned = pin_result_.load(std::memory_order_acquire);
  if (pinned == 0) p.cpus = cpus_;
  p.pin_pending = pinned == kNotPinnedYet && !cpus_.empty();
  p.pin_error = pinned < 0 ? pinned : 0;
  p.staging_node = staging_node_;
  return p;
}

Worker::~Worker() {
  contexts_.clear();  // each context's events and stream, then the context let go
  engine_.reset();  // unregisters the slabs from the kernel; the memory is the executor's
}

Worker::ContextRes::~ContextRes() {
  if (const cuda::Driver* d = cuda::driver())
    for (cuda::CUevent e : events) d->EventDestroy(e);
}

Error Worker::init(void* staging, int landed, std::string* why) {
  slots_.resize(cfg_.slabs_per_worker);
  copy_order_.assign(slots_.size(), 0);
  slabs_bytes_ = staging_bytes();
  slabs_ = static_cast<char*>(staging);
  staging_node_ = landed;
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].slab = slabs_ + i * cfg_.slab_bytes;
  // Sized for the ring it may grow to (offer_slabs): a full ring never refuses an op.
  const unsigned most_slots = std::max(cfg_.slabs_per_worker, cfg_.cold_slabs_per_worker);
  const unsigned depth = std::max<unsigned>(cfg_.ring_depth, most_slots * kMaxPack * kSegsPerPiece);
  engine_ = io::make_engine(cfg_.engine, depth, why);
  if (!engine_) return Error::of(Errc::io_not_supported);
  iovec iov{slabs_, slabs_bytes_};
  registered_ = engine_->register_buffers(&iov, 1);
  batch_dst_.reserve(kMaxPack);
  batch_src_.reserve(kMaxPack);
  batch_size_.reserve(kMaxPack);
  return Error::none();
}

void Worker::run() {
  for (;;) {
    // Here the worker holds no lock and is in no call: where it parks while a fork is under way
    // (executor.hpp). One atomic load per turn.
    owner_.safe_point();
    if (offered_.load(std::memory_order_relaxed) != nullptr) take_offered_slabs();
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

void Worker::offer_slabs(char* slabs) { offered_.store(slabs, std::memory_order_release); }

// Between two turns, where no reference into slots_ is held. The new slabs are not registered
// with the engine (registering again would mean unregistering first, with IO in flight): their
// IO goes without the fixed-buffer shortcut, which costs a read past the page cache nothing
// measurable next to the disk it waits for. Their copy events are made as their first copies
// are recorded (record_copy).
void Worker::take_offered_slabs() {
  char* slabs = offered_.exchange(nullptr, std::memory_order_acquire);
  if (slabs == nullptr) return;
  const size_t had = slots_.size();
  slots_.resize(cfg_.cold_slabs_per_worker);  // offered only when that is deeper
  copy_order_.resize(slots_.size(), 0);
  for (size_t k = had; k < slots_.size(); ++k) slots_[k].slab = slabs + (k - had) * cfg_.slab_bytes;
}

// One new slot per turn of the loop: a page-cache read completes inside the submit that
// follows (io_uring copies it there), so a worker filling two slots at once would copy them one
// after the other while another woken worker finds nothing left. The next turn, right after
// the submit, fills the next one.
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
// unreported: no lock needed), else of the oldest listed job. Packed slots hold whole jobs:
// nothing more to claim from those.
bool Worker::claim_next(Chunk* out) {
  for (const Slot& s : slots_)
    if (s.stage != Stage::free && s.count == 1 && s.pieces[0].chunk.job->claim(out)) return true;
  return owner_.claim_listed(out, near_gpus_);
}

void Worker::start(unsigned i, const Chunk& c) {
  Slot& s = slots_[i];
  s.count = 0;
  s.ctx = c.job->mem.context;
  if (!add_piece(s, c, 0)) {
    // Canceled: reported already; nothing else to do with this slot.
    return;
  }
  const Job& job = *c.job;
  if (job.windows != nullptr && start_from_window(i, c)) return;
  if (job.staged() && !is_read(job)) {
    s.stage = Stage::copy_to_host;
    if (Error e = start_copy_to_host(i)) report(i, s.pieces[0], 0, e);
    return;
  }
  // A small read into GPU memory: other small reads for the same GPU share the slab.
  if (job.staged() && Executor::packable(job, kPackBytes)) {
    uint64_t used = align_up(slab_bytes_for(c), uint64_t{4096});
    Chunk more;
    const unsigned most = std::clamp(c.job->pack_with, 1u, kMaxPack);
    while (s.count < most &&
           owner_.claim_packable(&more, s.ctx, kPackBytes, cfg_.slab_bytes - used)) {
      const uint64_t at = used;
      used += align_up(slab_bytes_for(more), uint64_t{4096});
      add_piece(s, more, at);
    }
  }
  if (s.count == 0) return;
  // Decided before the IO is issued: a piece may be done and its job gone once issue_all returns
  // (the posix engine completes IO inside it).
  const ChunkPlan& plan = s.pieces[0].plan;
  const uint64_t direct_piece = cfg_.direct_piece_bytes > 0 ? cfg_.direct_piece_bytes : cfg_.slab_bytes;
  const bool cold = s.count == 1 && is_read(job) && job.staged() && plan.count > 0 && plan.seg[0].direct &&
                    c.len >= direct_piece / 2;
  const cuda::CUcontext ctx = s.ctx;
  issue_all(i);
  // Asked once this piece's IO is in flight: the disk works while the deeper ring is pinned.
  if (cold && ++cold_pieces_ == kColdPiecesBeforeDeeper) owner_.deepen_for_cold(ctx);
}

bool Worker::start_from_window(unsigned i, const Chunk& c) {
  Slot& s = slots_[i];
  Piece& p = s.pieces[0];
  Job& job = *c.job;
  const uint64_t want = job.in_file(c.off, c.len);
  if (want == 0) return false;
  // Workers only use windows made already: making one holds the driver up for milliseconds,
  // which the calling thread of a read pays (Job::makes_windows_ahead), not a worker's pipeline.
  const char* bytes = job.windows->acquire(job.file.fd_buffered, c.off, want, job.file_size,
                                           s.ctx, /*may_make=*/false, &p.window);
  if (bytes == nullptr) return false;
  p.mem = const_cast<char*>(bytes);  // only read: a host-to-device copy's source
  p.plan = ChunkPlan{};
  p.plan.base = c.off;
  p.got = want;
  p.copying = true;
  s.stage = Stage::copy_to_device;
  if (Error e = start_copies_to_device(i)) report(i, p, 0, e);
  return true;
}

// Adds chunk `c` to the slot, its blocks at slab byte `at`. A piece of a canceled job is
// reported at once instead (false).
bool Worker::add_piece(Slot& s, const Chunk& c, uint64_t at) {
  if (c.job->canceled()) {
    c.job->chunk_done(c.off, c.len, 0, Error::of(Errc::canceled));
    return false;
  }
  Piece& p = s.pieces[s.count++];
  p.chunk = c;
  p.mem = s.slab + at;
  p.plan = plan_chunk(*c.job, c.off, c.len, p.mem);
  p.got = 0;
  p.err = Error::none();
  p.copying = false;
  s.stage = Stage::io;
  return true;
}

void Worker::issue_all(unsigned i) {
  Slot& s = slots_[i];
  s.stage = Stage::io;
  s.io_pending = s.count;
  for (unsigned p = 0; p < s.count; ++p) {
    Piece& piece = s.pieces[p];
    piece.segs_pending = piece.plan.count;
    if (piece.plan.count == 0) {
      piece_io_finished(i, piece);
      continue;
    }
    for (int k = 0; k < piece.plan.count; ++k) issue(i, p, k);
  }
}

void Worker::issue(unsigned i, unsigned p, int k) {
  Piece& piece = slots_[i].pieces[p];
  Segment& seg = piece.plan.seg[k];
  io::Op op;
  op.kind = piece.chunk.job->kind;
  op.fd = seg.fd;
  op.buf = seg.mem + seg.done;
  op.len = static_cast<uint32_t>(seg.len - seg.done);
  op.off = seg.file_off + seg.done;
  op.tag = (i * kMaxPack + p) * kSegsPerPiece + static_cast<unsigned>(k);
  if (std::mutex* turn = piece.chunk.job->file.write_lock.get(); turn && op.kind == sys::IoKind::write)
    return write_in_turn(op, *turn);
  // Blocks this worker until the piece's bytes are cached: its other slots' copies wait
  // meanwhile. Only reads of uncached bytes under a keeping cache policy fill, and those wait
  // for the disk either way (a cold start ran 3-5% slower than before the fill, H200).
  fill_cache_first(*piece.chunk.job, seg);
  const bool in_slab = seg.mem >= slabs_ && seg.mem < slabs_ + slabs_bytes_;
  op.buf_index = registered_ && in_slab ? 0 : -1;
  if (!engine_->queue(op)) {
    // The ring is sized for every segment of every piece of every slot, so this means the
    // engine broke.
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
  const unsigned k = static_cast<unsigned>(tag % kSegsPerPiece);
  const unsigned p = static_cast<unsigned>(tag / kSegsPerPiece % kMaxPack);
  const unsigned i = static_cast<unsigned>(tag / kSegsPerPiece / kMaxPack);
  Piece& piece = slots_[i].pieces[p];
  Error err;
  switch (apply_result(*piece.chunk.job, piece.plan.seg[k], res, &err)) {
    case SegmentNext::again: return issue(i, p, static_cast<int>(k));
    case SegmentNext::failed:
      if (piece.err.ok()) piece.err = err;
      break;
    case SegmentNext::finished: break;
  }
  if (--piece.segs_pending == 0) piece_io_finished(i, piece);
}

void Worker::piece_io_finished(unsigned i, Piece& p) {
  if (p.err.ok()) {
    p.got = contiguous_bytes(p.plan, p.chunk.off, p.chunk.len);
    if (!is_read(*p.chunk.job) && p.got < p.chunk.len) p.err = Error::sys(EIO);
  }
  if (--slots_[i].io_pending == 0) io_finished(i);
}

// Every piece's kernel IO is done: reads into GPU memory copy their bytes on; the rest is
// reported.
void Worker::io_finished(unsigned i) {
  Slot& s = slots_[i];
  const Job& first = *s.pieces[0].chunk.job;
  bool copy = false;
  if (first.staged() && is_read(first)) {
    for (unsigned p = 0; p < s.count; ++p) s.pieces[p].copying = s.pieces[p].err.ok() && s.pieces[p].got > 0;
    for (unsigned p = 0; p < s.count; ++p) copy |= s.pieces[p].copying;
  }
  if (copy) {
    s.stage = Stage::copy_to_device;
    if (Error e = start_copies_to_device(i))
      for (unsigned p = 0; p < s.count; ++p)
        if (s.pieces[p].copying) s.pieces[p].err = e;
  }
  // Pieces with nothing to copy (failed, or nothing there at end of file) are reported now;
  // the last report frees the slot, so the copied ones go first when their copy failed.
  const unsigned n = s.count;
  for (unsigned p = 0; p < n; ++p) {
    Piece& piece = s.pieces[p];
    if (copy && piece.copying && piece.err.ok()) continue;
    report(i, piece, piece.err ? 0 : piece.got, piece.err);
  }
}

Worker::ContextRes* Worker::find_res(cuda::CUcontext ctx) {
  for (ContextRes& r : contexts_)
    if (r.stream.context() == ctx) return &r;
  return nullptr;
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
  if (ContextRes* r = find_res(ctx)) return r;
  ContextRes res;
  // Non-blocking: a stream op of cuFileReadAsync on the legacy default stream waits for this
  // worker's copies, so they must not wait for the legacy stream as a whole. A synchronous
  // call's copies wait for what was queued there before the call (Job::after) instead.
  // Its copy events are made as each slot's first copy is recorded (record_copy).
  if (cuda::CUresult r = cuda::ContextStream::make(ctx, cuda::CU_STREAM_NON_BLOCKING, &res.stream);
      r != cuda::CUDA_SUCCESS) {
    *err = Error::cu(r);
    return nullptr;
  }
  contexts_.push_back(std::move(res));
  return &contexts_.back();
}

// A write's piece leaves the GPU for the slab; its kernel IO follows (copy_finished).
Error Worker::start_copy_to_host(unsigned i) {
  Slot& s = slots_[i];
  Piece& p = s.pieces[0];
  const Job& job = *p.chunk.job;
  Error err;
  ContextRes* res = context_res(s.ctx, &err);
  if (res == nullptr) return err;
  const cuda::Driver* d = cuda::driver();
  if (job.after != nullptr)
    if (cuda::CUresult r = d->StreamWaitEvent(res->stream.get(), job.after, 0); r != cuda::CUDA_SUCCESS)
      return Error::cu(r);
  char* host = p.mem + (p.chunk.off - p.plan.base);
  cuda::CUresult r = d->MemcpyDtoHAsync(host, job.addr + (p.chunk.off - job.file_off), p.chunk.len,
                                        res->stream.get());
  if (r != cuda::CUDA_SUCCESS) return Error::cu(r);
  return record_copy(i, *res);
}

// The pieces read into the slab go to the GPU: one copy, or one batched copy for a packed slot
// (one copy each where the driver has no cuMemcpyBatchAsync).
Error Worker::start_copies_to_device(unsigned i) {
  Slot& s = slots_[i];
  Error err;
  ContextRes* res = context_res(s.ctx, &err);
  if (res == nullptr) return err;
  const cuda::Driver* d = cuda::driver();
  batch_dst_.clear();
  batch_src_.clear();
  batch_size_.clear();
  for (unsigned p = 0; p < s.count; ++p) {
    const Piece& piece = s.pieces[p];
    if (!piece.copying) continue;
    const Job& job = *piece.chunk.job;
    if (job.after != nullptr)
      if (cuda::CUresult r = d->StreamWaitEvent(res->stream.get(), job.after, 0); r != cuda::CUDA_SUCCESS)
        return Error::cu(r);
    batch_dst_.push_back(job.addr + (piece.chunk.off - job.file_off));
    batch_src_.push_back(reinterpret_cast<cuda::CUdeviceptr>(piece.mem + (piece.chunk.off - piece.plan.base)));
    batch_size_.push_back(piece.got);
  }
  cuda::CUresult r = cuda::CUDA_SUCCESS;
  if (batch_dst_.size() > 1 && d->MemcpyBatchAsync != nullptr) {
    cuda::CUmemcpyAttributes attr{};
    attr.srcAccessOrder = cuda::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t first = 0;
    r = d->MemcpyBatchAsync(batch_dst_.data(), batch_src_.data(), batch_size_.data(),
                            batch_dst_.size(), &attr, &first, 1, res->stream.get());
  } else {
    for (size_t k = 0; k < batch_dst_.size() && r == cuda::CUDA_SUCCESS; ++k)
      r = d->MemcpyHtoDAsync(batch_dst_[k], reinterpret_cast<const void*>(batch_src_[k]),
                             batch_size_[k], res->stream.get());
  }
  if (r != cuda::CUDA_SUCCESS) {
    Executor::WaitOutside outside(owner_);
    d->StreamSynchronize(res->stream.get());  // copies queued before the failure read the slab
    return Error::cu(r);
  }
  return record_copy(i, *res);
}

Error Worker::record_copy(unsigned i, ContextRes& res) {
  const cuda::Driver* d = cuda::driver();
  // A slot's event in this context is made at its first copy here (the context is current: the
  // copy was just queued in it), for the slots of the first ring and those taken in later alike.
  while (res.events.size() <= i) {
    cuda::CUevent e = nullptr;
    if (cuda::CUresult r = d->EventCreate(&e, cuda::CU_EVENT_DISABLE_TIMING); r != cuda::CUDA_SUCCESS) {
      Executor::WaitOutside outside(owner_);
      d->StreamSynchronize(res.stream.get());  // the queued copy reads the slab
      return Error::cu(r);
    }
    res.events.push_back(e);
  }
  if (cuda::CUresult r = d->EventRecord(res.events[i], res.stream.get()); r != cuda::CUDA_SUCCESS) {
    // The copy may have been queued before EventRecord failed: let it drain before the slab
    // is reused.
    Executor::WaitOutside outside(owner_);
    d->StreamSynchronize(res.stream.get());
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
    cuda::CUresult r = cuda::driver()->EventQuery(find_res(slots_[i].ctx)->events[i]);
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
  ContextRes* res = find_res(slots_[oldest].ctx);
  cuda::CUresult r;
  {
    Executor::WaitOutside outside(owner_);  // the copy may wait behind the legacy stream
    r = cuda::driver()->EventSynchronize(res->events[oldest]);
  }
  copy_finished(oldest, r);
  return true;
}

void Worker::copy_finished(unsigned i, cuda::CUresult r) {
  Slot& s = slots_[i];
  const Error err = r == cuda::CUDA_SUCCESS ? Error::none() : Error::cu(r);
  if (s.stage == Stage::copy_to_host) {
    if (err) return report(i, s.pieces[0], 0, err);
    return issue_all(i);
  }
  const unsigned n = s.count;
  for (unsigned p = 0; p < n; ++p) {
    Piece& piece = s.pieces[p];
    if (piece.copying) report(i, piece, err ? 0 : piece.got, err);
  }
}

void Worker::report(unsigned i, Piece& p, uint64_t got, Error err) {
  Slot& s = slots_[i];
  const Chunk c = p.chunk;
  p.copying = false;
  p.chunk = Chunk{};
  if (p.window.held()) {  // the copy is done with the window (or never ran)
    c.job->windows->release(&p.window);
    if (err.ok()) c.job->window_bytes.fetch_add(got, std::memory_order_relaxed);
  }
  // The slot is free before the last report: the job may be destroyed by it (batch
  // completions do), and nothing of it may be touched after.
  bool last = true;
  for (unsigned k = 0; k < s.count && last; ++k) last = s.pieces[k].chunk.job == nullptr;
  if (last) {
    s.stage = Stage::free;
    s.count = 0;
  }
  c.job->chunk_done(c.off, c.len, got, err);
}

}  // namespace gpufile::exec
