#include "exec/job.hpp"

#include <algorithm>
#include <cerrno>

#include "core/align.hpp"
#include "exec/executor.hpp"

namespace gpufile::exec {

void Job::split(uint64_t step) {
  grid_ = align_down(file_off, file.align.offset);
  step_ = step;
  pieces_ = len == 0 ? 1 : static_cast<uint32_t>((end() - grid_ + step - 1) / step);
  next_piece_.store(0, std::memory_order_relaxed);
  pending_.store(pieces_, std::memory_order_relaxed);
}

bool Job::take(uint32_t* index) {
  // A plain load first: threads that find the job exhausted do not write its cache line.
  if (next_piece_.load(std::memory_order_relaxed) >= pieces_) return false;
  const uint32_t k = next_piece_.fetch_add(1, std::memory_order_relaxed);
  if (k >= pieces_) return false;
  *index = k;
  return true;
}

Chunk Job::piece(uint32_t k) {
  const uint64_t begin = std::max(file_off, grid_ + k * step_);
  const uint64_t stop = std::min(end(), grid_ + (k + 1) * step_);
  return Chunk{this, begin, stop - begin};
}

uint64_t Job::unclaimed_from() const {
  const uint32_t k = next_piece_.load(std::memory_order_relaxed);
  return k >= pieces_ ? end() : std::max(file_off, grid_ + k * step_);
}

bool Job::claim(Chunk* out) {
  uint32_t k;
  if (!take(&k)) return false;
  *out = piece(k);
  // The last piece is out: off the executor's list before it can complete (a listed job must
  // stay alive, and only a piece not yet reported keeps it so).
  if (k + 1 == pieces_ && listed_by_ != nullptr) listed_by_->retire(this);
  return true;
}

void Job::chunk_done(uint64_t off, uint64_t chunk_len, uint64_t got, Error err) {
  if (err) {
    std::lock_guard lock(error_mu_);
    if (error_.ok()) error_ = err;
  } else if (got < chunk_len) {
    // A short chunk marks end of file: nothing at or after off+got counts.
    uint64_t at = off + got;
    uint64_t cur = eof_at_.load(std::memory_order_relaxed);
    while (at < cur && !eof_at_.compare_exchange_weak(cur, at, std::memory_order_relaxed)) {
    }
  }
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) finish();
}

void Job::finish() {
  if (on_complete) {
    // The callback owns what follows and may destroy this job (batch completions do): touch
    // nothing of *this after it.
    Callback cb = std::move(on_complete);
    cb(*this);
    return;
  }
  done_.store(1, std::memory_order_release);
  done_.notify_all();
}

void Job::wait() const {
  while (done_.load(std::memory_order_acquire) == 0) done_.wait(0, std::memory_order_acquire);
}

IoResult Job::result() const {
  IoResult r;
  {
    std::lock_guard lock(const_cast<std::mutex&>(error_mu_));
    r.error = error_;
  }
  if (r.error.ok() && canceled()) r.error = Error::of(Errc::canceled);
  if (!r.error.ok()) return r;
  uint64_t eof = eof_at_.load(std::memory_order_relaxed);
  r.bytes = eof >= end() ? len : (eof > file_off ? eof - file_off : 0);
  return r;
}

namespace {

char* caller_memory(const Job& job, uint64_t off) {
  return reinterpret_cast<char*>(job.addr + (off - job.file_off));
}

void add(ChunkPlan& p, int fd, bool direct, uint64_t off, uint64_t len, char* mem) {
  if (len == 0) return;
  p.seg[p.count++] = Segment{fd, direct, off, len, mem, 0, 0};
}

// Head and tail go through the page cache; the aligned body through O_DIRECT.
void plan_split(const Job& job, ChunkPlan& p, uint64_t off, uint64_t end, char* mem_at_off,
                bool body_direct) {
  const FileRef& f = job.file;
  if (!body_direct) {
    add(p, f.fd_buffered, false, off, end - off, mem_at_off);
    return;
  }
  AlignedSplit s = split_aligned(off, end, f.align.offset);
  add(p, f.fd_buffered, false, off, s.head_end - off, mem_at_off);
  add(p, f.fd_direct, true, s.head_end, s.body_end - s.head_end, mem_at_off + (s.head_end - off));
  add(p, f.fd_buffered, false, s.body_end, end - s.body_end, mem_at_off + (s.body_end - off));
}

}  // namespace

ChunkPlan plan_chunk(const Job& job, uint64_t off, uint64_t len, char* staging) {
  ChunkPlan p;
  const uint64_t end = off + len;
  const uint64_t a = job.file.align.offset;
  const bool direct = job.direct && job.file.fd_direct >= 0;
  if (job.staged()) {
    p.base = direct ? align_down(off, a) : off;
    if (job.kind == sys::IoKind::read && direct) {
      // Read whole blocks into the slab and copy out only the part asked for: no buffered IO.
      add(p, job.file.fd_direct, true, p.base, align_up(end, a) - p.base, staging);
    } else {
      plan_split(job, p, off, end, staging + (off - p.base), direct);
    }
    return p;
  }
  // Host memory: IO straight into the caller's buffer; O_DIRECT only where its address allows.
  // An O_DIRECT read of the block holding end of file fills the whole block with the bytes
  // past it, so host reads go direct only up to the last whole block before end of file; the
  // rest comes through the page cache, which never writes past what it reports.
  p.base = off;
  char* mem = caller_memory(job, off);
  uint64_t body = align_up(off, a);
  bool mem_ok = is_aligned(reinterpret_cast<uint64_t>(mem) + (body - off), job.file.align.mem);
  if (!direct || !mem_ok) {
    plan_split(job, p, off, end, mem, false);
    return p;
  }
  uint64_t direct_end = job.kind == sys::IoKind::read ? std::min(end, align_down(job.file_size, a)) : end;
  if (direct_end <= off) direct_end = off;
  plan_split(job, p, off, direct_end, mem, true);
  add(p, job.file.fd_buffered, false, direct_end, end - direct_end, mem + (direct_end - off));
  return p;
}

SegmentNext apply_result(const Job& job, Segment& seg, int res, Error* err) {
  constexpr int kMaxRetries = 64;
  const bool read = job.kind == sys::IoKind::read;
  auto to_page_cache = [&] {
    seg.fd = job.file.fd_buffered;
    seg.direct = false;
  };
  if (res > 0) {
    seg.done += static_cast<uint64_t>(res);
    seg.retries = 0;  // only interruptions in a row without progress count towards giving up
    if (seg.done == seg.len) return SegmentNext::finished;
    if (seg.direct && !is_aligned(seg.file_off + seg.done, job.file.align.offset)) to_page_cache();
    return SegmentNext::again;
  }
  if (res == 0) {
    if (read) return SegmentNext::finished;  // end of file
    *err = Error::sys(EIO);                  // a write that moves nothing cannot progress
    return SegmentNext::failed;
  }
  if (res == -EAGAIN || res == -EINTR) {
    if (++seg.retries <= kMaxRetries) return SegmentNext::again;
    // Giving up on a storm of interruptions: EINTR would tell the caller that its own call was
    // interrupted by a signal, which it was not (the seeded simulation, tests/sim, saw EINTR
    // reach a caller). It is a temporary condition: EAGAIN.
    *err = Error::sys(EAGAIN);
    return SegmentNext::failed;
  }
  if (res == -EINVAL && seg.direct) {
    // The file took O_DIRECT at open but refuses this IO: go on through the page cache.
    to_page_cache();
    return SegmentNext::again;
  }
  *err = Error::sys(-res);
  return SegmentNext::failed;
}

void fill_cache_first(const Job& job, const Segment& seg) {
  // A fill reads whole folios (and the next one ahead): for a segment shorter than one (a small
  // read, a head or tail) it would read far more than asked; those come in as before.
  if (!job.fills_cache || job.kind != sys::IoKind::read || seg.direct || seg.len < sys::Os::kFillFolio)
    return;
  if (seg.done != 0 || seg.retries != 0) return;  // once per segment, not again on a retry
  if (const uint64_t n = job.in_file(seg.file_off, seg.len))
    sys::os().fill_cache(seg.fd, seg.file_off, static_cast<size_t>(n));
}

ssize_t io_now(const Job& job, const Segment& seg) {
  char* mem = seg.mem + seg.done;
  const uint64_t n = seg.len - seg.done, at = seg.file_off + seg.done;
  if (job.kind == sys::IoKind::read) return sys::os().pread(seg.fd, mem, n, at);
  if (std::mutex* turn = job.file.write_lock.get()) return pwrite_in_turn(*turn, seg.fd, mem, n, at);
  return sys::os().pwrite(seg.fd, mem, n, at);
}

// Measured on the H100: 16 workers writing to /dev/shm at once burnt 4.4 CPU-seconds per GiB for
// the speed one writer gets with 0.4. Waiting asleep for the turn, the copies out of the GPU
// still overlap the writes.
ssize_t pwrite_in_turn(std::mutex& turn, int fd, const void* buf, size_t len, uint64_t off) {
  std::lock_guard lock(turn);
  return sys::os().pwrite(fd, buf, len, off);
}

uint64_t contiguous_bytes(const ChunkPlan& plan, uint64_t off, uint64_t len) {
  for (int i = 0; i < plan.count; ++i) {
    const Segment& s = plan.seg[i];
    if (s.done < s.len) {
      uint64_t have_end = s.file_off + s.done;
      return have_end <= off ? 0 : std::min(len, have_end - off);
    }
  }
  return len;
}

}  // namespace gpufile::exec
