#include "api/remote_file.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log.hpp"
#include "core/stats.hpp"
#include "cuda/memory.hpp"
#include "exec/remote_pool.hpp"
#include "exec/session.hpp"

namespace gpufile::api {
namespace {

// The GPU that `buf` is on, or -1 for host memory. Asked of the driver only when the
// per-device rows are collected (stats level 3): a remote call needs no device otherwise.
int device_for_stats(const void* buf) {
  if (!stats::collecting(3)) return -1;
  cuda::MemInfo mem;
  if (cuda::classify(buf, &mem) || !mem.needs_staging()) return -1;
  return mem.device;
}

// Counts one remote read or write call: the call (cuFile's statistics), its bytes under the
// "remote" path, and its latency and device.
void count_remote(sys::IoKind kind, const void* buf, const IoResult& r, uint64_t started) {
  Runtime::count_call(kind, r, started);
  const stats::Op op = kind == sys::IoKind::read ? stats::Op::read : stats::Op::write;
  if (r.ok() && r.bytes > 0) stats::record_path(op, stats::Path::remote, r.bytes);
  stats::record_finished(op, stats::Path::remote, device_for_stats(buf), r.bytes, started, r.ok());
}

}  // namespace

remote::Failure RemoteFile::open(const std::string& url, std::unique_ptr<RemoteFile>* out) {
  remote::Options o;
  if (Error e = Runtime::instance().remote_options(&o))
    return remote::fail_at(EIO, url, "the gpufile driver did not open: " + describe(e));
  std::unique_ptr<RemoteFile> f(new RemoteFile());
  if (remote::Failure why = remote::Object::open(url, o, &f->object_); !why.ok()) {
    GPUFILE_LOG(LogLevel::debug, "remote open failed: %s", why.message.c_str());
    return why;
  }
  GPUFILE_LOG(LogLevel::debug, "remote open: %s: %llu bytes, ETag %s", remote::shown(url).c_str(),
              static_cast<unsigned long long>(f->size()), f->etag().c_str());
  // Its Futures run on the remote pool: as many threads as its reads would share.
  exec::RemotePool::instance().allow(exec::remote_threads_for(o));
  *out = std::move(f);
  return {};
}

RemoteFile::~RemoteFile() { close(); }

void RemoteFile::close() {
  closed_ = true;
  wait_for_zero(*running_);
}

IoResult RemoteFile::read(void* buf, uint64_t size, uint64_t offset, remote::Failure* why) {
  if (closed_) return {0, Error::sys(EBADF)};
  const uint64_t t0 = stats::call_started();
  IoResult r = Runtime::instance().read_remote(*object_, buf, size, offset, why);
  count_remote(sys::IoKind::read, buf, r, t0);
  return r;
}

Error RemoteFile::start(void* buf, uint64_t size, uint64_t offset, std::unique_ptr<Future>* out) {
  if (closed_) return Error::sys(EBADF);
  // Counted in running_ until the task is destroyed, which is after its Future is done: a
  // close() that waited for the count returns with every Future done.
  struct Running {
    std::shared_ptr<std::atomic<int>> count;
    ~Running() { drop(*count); }
  };
  running_->fetch_add(1, std::memory_order_acq_rel);
  std::shared_ptr<Running> running(new Running{running_});
  // The task holds the object too, so it stays until the read ended.
  *out = Future::spawn([obj = object_, running, buf, size, offset](std::string* message) {
    const uint64_t t0 = stats::call_started();
    remote::Failure why;
    IoResult r = Runtime::instance().read_remote(*obj, buf, size, offset, &why);
    count_remote(sys::IoKind::read, buf, r, t0);
    *message = std::move(why.message);
    return r;
  });
  return Error::none();
}

// ---- RemoteWriter ----------------------------------------------------------------------------

// A writer's part buffers: the one being filled and those whose parts are in flight. Pinned
// (GPU memory is copied in with the driver's DMA): lent by the session's `uploads` pool, else,
// for a writer's first buffer only, pinned for it alone.
struct RemoteWriter::Parts {
  struct Slot {
    char* mem = nullptr;
    exec::StagingPool::Buffer* lent = nullptr;  // null: pinned for this writer
    bool sending = false;                       // mu
  };

  Parts(std::shared_ptr<Session> s, uint64_t part_bytes, unsigned most_slots)
      : session(std::move(s)), bytes(part_bytes), most(most_slots) {
    slots.reserve(most);  // never moves: parts in flight find their slot by index
  }
  ~Parts() { release(); }

  char* current() const { return slots[filling].mem; }

  // One more buffer: the pool's, else (`may_pin`) one pinned now.
  bool add_slot(bool may_pin) {
    cuda::ScopedAnyContext ctx;  // pinning needs a context on this thread (any thread may write)
    exec::StagingPool::Buffer* b = nullptr;
    Slot slot;
    if (session->uploads.take(&b, 1) == 1) {
      slot = {b->mem, b};
    } else {
      void* mem = nullptr;
      if (!may_pin || cuda::alloc_pinned(bytes, &mem)) return false;
      slot.mem = static_cast<char*>(mem);
    }
    std::lock_guard lock(mu);
    slots.push_back(slot);
    return true;
  }

  // The next buffer to fill, once the one filled went out: a free one, a new one while fewer
  // than `most`, else the first whose part lands (so at most `most` parts are in flight). A
  // failed part ends the wait.
  remote::Failure next_slot() {
    std::unique_lock lock(mu);
    for (;;) {
      if (!failure.ok()) return failure;
      for (size_t i = 0; i < slots.size(); ++i)
        if (!slots[i].sending) {
          filling = i;
          filled = 0;
          return {};
        }
      if (slots.size() < most) {
        lock.unlock();
        const bool added = add_slot(false);
        lock.lock();
        if (added) continue;
      }
      sent.wait(lock);
    }
  }

  // Once every part in flight landed: the first failure among them.
  remote::Failure wait_all() {
    std::unique_lock lock(mu);
    sent.wait(lock, [this] { return in_flight == 0; });
    return failure;
  }

  // The buffers back (no part may be in flight), and the session with them.
  void release() {
    if (!session) return;
    cuda::ScopedAnyContext ctx;  // unpinning needs a context on this thread
    for (Slot& s : slots) {
      if (s.lent != nullptr)
        session->uploads.give(&s.lent, 1);
      else
        cuda::free_pinned(s.mem, bytes);
    }
    slots.clear();
    session.reset();
  }

  std::shared_ptr<Session> session;  // keeps the pool the buffers came from
  const uint64_t bytes;
  const unsigned most;  // buffers at most, so parts in flight at most
  std::mutex mu;
  std::condition_variable sent;  // a part landed or failed
  std::vector<Slot> slots;
  size_t filling = 0;            // the writer's thread only
  uint64_t filled = 0;           // the writer's thread only
  unsigned in_flight = 0;        // mu
  remote::Failure failure;       // mu: the first failed part's
};

remote::Failure RemoteWriter::open(const std::string& url, std::unique_ptr<RemoteWriter>* out) {
  remote::Options o;
  std::shared_ptr<Session> s;
  Error e = Runtime::instance().remote_options(&o);
  if (!e) e = Runtime::instance().remote_session(&s);
  if (e) return remote::fail_at(EIO, url, "the gpufile driver did not open: " + describe(e));
  std::unique_ptr<RemoteWriter> w(new RemoteWriter());
  if (remote::Failure f = remote::Upload::prepare(url, o, &w->upload_); !f.ok()) return f;
  GPUFILE_LOG(LogLevel::debug, "remote writer: %s", remote::shown(url).c_str());
  w->part_bytes_ = s->uploads.bytes();
  w->parts_ = std::make_shared<Parts>(std::move(s), w->part_bytes_, remote::upload_parts_in_flight(o));
  if (!w->parts_->add_slot(true)) return remote::fail_at(ENOMEM, url, "no pinned memory for a part");
  exec::RemotePool::instance().allow(exec::remote_threads_for(o));
  *out = std::move(w);
  return {};
}

RemoteWriter::~RemoteWriter() { abort(); }

uint64_t RemoteWriter::written() const { return written_.load(std::memory_order_acquire); }

bool RemoteWriter::closed() const {
  return done_.load(std::memory_order_acquire) || closing_.load(std::memory_order_acquire);
}

// Called from a write (on whichever thread runs it): ends the upload, keeps why for close().
// Started writes still queued then fail with EBADF when their turn comes.
remote::Failure RemoteWriter::fail(remote::Failure f) {
  failure_ = f;
  done_ = true;
  if (parts_) {
    parts_->wait_all();
    upload_->abort();
    parts_->release();
  }
  return f;
}

// The filled buffer goes out as the next part: on a pool thread that is free now, else on this
// one (then the part is sent before this returns). So every part counted in flight is really
// being sent, and waiting for one never waits for queued work: a write running on a pool
// thread (a started one) cannot deadlock the pool. `then_next` picks the buffer to fill next
// (waiting for a part to land when all are in flight).
remote::Failure RemoteWriter::send_filled(bool then_next) {
  if (sent_ == 0)
    if (remote::Failure f = upload_->begin(); !f.ok()) return f;
  if (std::string why = remote::part_limit_exceeded(sent_ + 1, part_bytes_); !why.empty())
    return remote::fail_at(EFBIG, url(), why);
  Parts& p = *parts_;
  const size_t slot = p.filling;
  const unsigned number = ++sent_;
  {
    std::lock_guard lock(p.mu);
    p.slots[slot].sending = true;
    ++p.in_flight;
  }
  // The writer waits for every part in flight before the upload or the buffers go.
  std::vector<std::function<void()>> part;
  part.push_back([parts = parts_, upload = upload_.get(), mem = p.current(), slot, number,
                  len = p.filled] {
    remote::Failure f = upload->put_part(number, mem, len);
    std::lock_guard lock(parts->mu);
    parts->slots[slot].sending = false;
    if (!f.ok() && parts->failure.ok()) parts->failure = std::move(f);
    --parts->in_flight;
    parts->sent.notify_all();
  });
  if (exec::RemotePool::instance().start_now(part) == 0) part.front()();
  return then_next ? p.next_slot() : remote::Failure{};
}

remote::Failure RemoteWriter::copy_in(const cuda::MemInfo& mem, const char* from, uint64_t n) {
  char* to = parts_->current() + parts_->filled;
  if (!mem.needs_staging()) {
    std::memcpy(to, from, n);
    return {};
  }
  const cuda::CUresult r = cuda::driver()->MemcpyDtoH(to, reinterpret_cast<cuda::CUdeviceptr>(from), n);
  if (r != cuda::CUDA_SUCCESS) return remote::fail_at(EIO, url(), "copy from the GPU failed: " + cuda::describe(r));
  return {};
}

IoResult RemoteWriter::write(const void* buf, uint64_t size, remote::Failure* why) {
  if (closing_) {  // refused at once: nothing is appended behind a close
    *why = remote::fail_at(EBADF, url(), "the upload is over (a close was started)");
    return {0, Error::sys(EBADF)};
  }
  wait_for_started();
  return write_now(buf, size, why);
}

IoResult RemoteWriter::write_now(const void* buf, uint64_t size, remote::Failure* why) {
  const uint64_t t0 = stats::call_started();
  IoResult r = append(buf, size, why);
  count_remote(sys::IoKind::write, buf, r, t0);
  return r;
}

IoResult RemoteWriter::append(const void* buf, uint64_t size, remote::Failure* why) {
  auto failed = [why](remote::Failure f) {
    *why = std::move(f);
    return IoResult{0, Error::sys(why->err)};
  };
  if (done_) return failed(remote::fail_at(EBADF, url(), "the upload is over (closed, aborted or failed)"));
  if (size == 0) return {0, Error::none()};
  cuda::MemInfo mem;
  if (Error e = cuda::classify(buf, &mem)) return {0, e};
  cuda::ScopedContext ctx(mem.needs_staging() ? mem.context : nullptr);
  const char* from = static_cast<const char*>(buf);
  for (uint64_t done = 0; done < size;) {
    // A full part goes out only once more bytes follow it: an object of one part is one PUT.
    if (parts_->filled == part_bytes_)
      if (remote::Failure f = send_filled(true); !f.ok()) return failed(fail(std::move(f)));
    const uint64_t n = std::min(size - done, part_bytes_ - parts_->filled);
    if (remote::Failure f = copy_in(mem, from + done, n); !f.ok()) return failed(fail(std::move(f)));
    parts_->filled += n;
    done += n;
  }
  written_.fetch_add(size, std::memory_order_acq_rel);
  return {size, Error::none()};
}

Error RemoteWriter::start(const void* buf, uint64_t size, std::unique_ptr<Future>* out) {
  if (done_ || closing_) return Error::sys(EBADF);
  Future::Finish finish;
  std::unique_ptr<Future> f = Future::pending(&finish);
  queue({buf, size, std::move(finish)});
  *out = std::move(f);
  return Error::none();
}

void RemoteWriter::start_close(std::unique_ptr<Future>* out) {
  Future::Finish finish;
  std::unique_ptr<Future> f = Future::pending(&finish);
  closing_ = true;  // before it is queued: no write made after this call is appended
  queue({nullptr, 0, std::move(finish), true});
  *out = std::move(f);
}

void RemoteWriter::queue(Started work) {
  bool post;
  {
    std::lock_guard lock(started_mu_);
    started_.push_back(std::move(work));
    post = !draining_;
    draining_ = true;
  }
  // One task drains the writes started while it runs, so they are appended in order. The
  // writer outlives it: every call that ends the writer waits for draining_ to drop.
  if (post)
    exec::RemotePool::instance().post([this] { drain(); }, [this] { drain_cancelled(); });
}

void RemoteWriter::drain() {
  for (;;) {
    Started w;
    {
      std::lock_guard lock(started_mu_);
      if (started_.empty()) {
        draining_ = false;
        drained_.notify_all();  // under the lock: the writer may go once a waiter has it
        return;
      }
      w = std::move(started_.front());
      started_.pop_front();
    }
    if (w.close) {
      remote::Failure f = close_now();
      w.finish(f.ok() ? IoResult{written(), Error::none()} : IoResult{0, Error::sys(f.err)},
               std::move(f.message));
      continue;
    }
    remote::Failure why;
    const IoResult r = write_now(w.buf, w.size, &why);
    w.finish(r, std::move(why.message));
  }
}

void RemoteWriter::cancel_started() {
  std::deque<Started> dropped;
  {
    std::lock_guard lock(started_mu_);
    dropped.swap(started_);
  }
  for (Started& w : dropped)
    w.finish({0, Error::sys(ECANCELED)},
             remote::shown(url()) + (w.close ? ": the close was cancelled (gpufile was unloaded before it ran)"
                                             : ": the write was cancelled (the writer was aborted)"));
}

// The pool ended (the library is being unloaded) before the drain started: nothing will run
// the started writes, so they fail, and the writer is free to go.
void RemoteWriter::drain_cancelled() {
  cancel_started();
  std::lock_guard lock(started_mu_);
  draining_ = false;
  drained_.notify_all();
}

void RemoteWriter::wait_for_started() {
  std::unique_lock lock(started_mu_);
  drained_.wait(lock, [this] { return !draining_; });
}

remote::Failure RemoteWriter::close() {
  wait_for_started();  // a start_close's close included: then this gives its result again
  return close_now();
}

remote::Failure RemoteWriter::close_now() {
  if (done_) {
    if (!failure_.ok()) return failure_;
    if (aborted_) return remote::fail_at(EBADF, url(), "the upload was aborted");
    return {};  // closed already
  }
  remote::Failure f;
  if (sent_ == 0) {  // the whole object within one part: one PutObject
    f = upload_->put_whole(parts_->current(), parts_->filled);
  } else {
    f = send_filled(false);
    if (f.ok()) f = parts_->wait_all();
    if (f.ok()) f = upload_->complete(sent_);
  }
  if (!f.ok()) return fail(std::move(f));
  done_ = true;
  parts_->release();
  return {};
}

void RemoteWriter::abort() {
  // After start_close the caller asked for the object: the writes queued before the close are
  // part of it, so nothing is cancelled; the close is waited for and its object left alone.
  if (!closing_) cancel_started();
  wait_for_started();
  if (!done_) aborted_ = true;
  done_ = true;
  if (!parts_) return;  // open failed
  parts_->wait_all();
  if (upload_) upload_->abort();
  parts_->release();
}

// ---- listing and deleting --------------------------------------------------------------------

namespace {

remote::Failure session_options(const std::string& url, remote::Options* o) {
  if (Error e = Runtime::instance().remote_options(o))
    return remote::fail_at(EIO, url, "the gpufile driver did not open: " + describe(e));
  return {};
}

}  // namespace

remote::Failure list_objects(const std::string& url, const remote::ListPage& page, std::string* xml) {
  remote::Options o;
  if (remote::Failure f = session_options(url, &o); !f.ok()) return f;
  return remote::list_objects(url, page, o, xml);
}

remote::Failure delete_object(const std::string& url) {
  remote::Options o;
  if (remote::Failure f = session_options(url, &o); !f.ok()) return f;
  return remote::delete_object(url, o);
}

remote::Failure get_object(const std::string& url, uint64_t max_bytes, remote::WholeObject* out) {
  remote::Options o;
  if (remote::Failure f = session_options(url, &o); !f.ok()) return f;
  return remote::get_whole(url, o, max_bytes, out);
}

}  // namespace gpufile::api
