#include "api/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/stats.hpp"
#include "exec/gather.hpp"
#include "exec/remote_pool.hpp"
#include "sys/os.hpp"

namespace gpufile::api {

std::optional<int> open_flags(std::string_view mode) {
  std::string m;
  for (char c : mode)
    if (c != 'b') m.push_back(c);
  if (m == "r") return O_RDONLY;
  if (m == "r+") return O_RDWR;
  if (m == "w") return O_WRONLY | O_CREAT | O_TRUNC;
  if (m == "w+") return O_RDWR | O_CREAT | O_TRUNC;
  if (m == "x") return O_WRONLY | O_CREAT | O_EXCL;
  if (m == "x+") return O_RDWR | O_CREAT | O_EXCL;
  if (m == "a") return O_WRONLY | O_CREAT;
  if (m == "a+") return O_RDWR | O_CREAT;
  return std::nullopt;
}

// ---- Future ----------------------------------------------------------------------------------

// Shared by the Future and the job's completion callback (which usually runs before anyone
// waits).
struct Future::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  IoResult result;
  std::string message;

  void finish(const IoResult& r, std::string why) {
    {
      std::lock_guard lock(mu);
      result = r;
      message = std::move(why);
      done = true;
    }
    cv.notify_all();
  }
};

Future::~Future() {
  if (state_) wait();
}

std::unique_ptr<Future> Future::spawn(std::function<IoResult(std::string* message)> task) {
  std::unique_ptr<Future> f(new Future());
  f->state_ = std::make_shared<State>();
  // The pool's callable, and with it the task and what it holds, is destroyed after finish():
  // the Future is done first. It shares the state: finish() may still notify after a waiter
  // saw the result and destroyed the Future.
  auto run = [state = f->state_, task = std::move(task)] {
    std::string message;
    IoResult r = task(&message);
    state->finish(r, std::move(message));
  };
  // The pool ended (the library is being unloaded) before the task started: it fails.
  auto cancel = [state = f->state_] {
    state->finish({0, Error::sys(ECANCELED)}, "the gpufile library was unloaded before the IO started");
  };
  exec::RemotePool::instance().post(std::move(run), std::move(cancel));
  return f;
}

std::unique_ptr<Future> Future::pending(Finish* finish) {
  std::unique_ptr<Future> f(new Future());
  f->state_ = std::make_shared<State>();
  *finish = [state = f->state_](const IoResult& r, std::string message) {
    state->finish(r, std::move(message));
  };
  return f;
}

std::unique_ptr<Future> Future::finished(const IoResult& r) {
  std::unique_ptr<Future> f(new Future());
  f->state_ = std::make_shared<State>();
  f->state_->finish(r, std::string());
  return f;
}

std::string Future::message() const {
  std::lock_guard lock(state_->mu);
  return state_->message;
}

bool Future::done() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

IoResult Future::wait() {
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->result;
}

bool Future::wait_for(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->done; });
}

// ---- File ------------------------------------------------------------------------------------

Error File::open(const std::string& path, int flags, mode_t mode, std::unique_ptr<File>* out) {
  if (flags & O_APPEND) return Error::of(Errc::invalid_open_flag);
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return Error::sys(errno);
  std::unique_ptr<File> f(new File());
  f->fd_ = fd;
  f->path_ = path;
  if (Error e = Runtime::instance().register_file(fd, &f->handle_)) {
    f->handle_ = nullptr;
    return e;  // ~File closes the fd
  }
  *out = std::move(f);
  return Error::none();
}

File::~File() { close(); }

Error File::close() {
  if (fd_ < 0) return Error::none();
  Error e;
  if (handle_ != nullptr) e = Runtime::instance().deregister_file(handle_);
  // A driver that was closed under us already forgot the handle: that is not a failure here.
  if (e.code == Errc::handle_not_registered || e.code == Errc::driver_not_open) e = Error::none();
  handle_ = nullptr;
  if (::close(fd_) != 0 && e.ok()) e = Error::sys(errno);
  fd_ = -1;
  return e;
}

Error File::size(uint64_t* out) const {
  if (fd_ < 0) return Error::sys(EBADF);
  struct stat st {};
  if (sys::os().fstat(fd_, &st) != 0) return Error::sys(errno);
  *out = static_cast<uint64_t>(st.st_size);
  return Error::none();
}

IoResult File::run(sys::IoKind kind, const void* buf, uint64_t size, int64_t file_offset,
                   int64_t buf_offset) {
  if (fd_ < 0) return {0, Error::sys(EBADF)};
  const uint64_t t0 = stats::call_started();
  IoResult r =
      Runtime::instance().read_write(kind, handle_, buf, size, file_offset, buf_offset);
  Runtime::count_call(kind, r, t0);
  return r;
}

IoResult File::read(void* buf, uint64_t size, int64_t file_offset, int64_t buf_offset) {
  return run(sys::IoKind::read, buf, size, file_offset, buf_offset);
}

IoResult File::write(const void* buf, uint64_t size, int64_t file_offset, int64_t buf_offset) {
  return run(sys::IoKind::write, buf, size, file_offset, buf_offset);
}

Error File::start(sys::IoKind kind, const void* buf, uint64_t size, int64_t file_offset,
                  std::unique_ptr<Future>* out, int64_t buf_offset) {
  if (fd_ < 0) return Error::sys(EBADF);
  const uint64_t t0 = stats::call_started();
  std::unique_ptr<Io> io;
  if (Error e = Runtime::instance().prepare(kind, handle_, buf, size, file_offset, buf_offset,
                                                &io)) {
    Runtime::count_call(kind, IoResult{0, e}, t0);
    return e;
  }
  // Path 5 takes large aligned IO into GPU memory as a synchronous call: done before start
  // returns, the Io (and its in-flight counts) gone with it.
  if (std::optional<IoResult> r = Runtime::instance().run_if_vendor(*io)) {
    Runtime::count_call(kind, *r, t0);
    *out = Future::finished(*r);
    return Error::none();
  }
  std::unique_ptr<Future> f(new Future());
  f->state_ = std::make_shared<Future::State>();
  // The callback owns the Io from here: it records the result, then destroys the Io (giving
  // back the file's and the session's in-flight counts) before it wakes the waiters. The
  // Future is done before the counts drop: a close() that waited for them returns with every
  // Future of the file done (Python's test_close_waits_for_futures_it_did_not_see saw one not
  // yet done under load).
  Io* raw = io.release();
  raw->job.on_complete = [state = f->state_, raw, t0](exec::Job& job) {
    IoResult r = job.result();
    Runtime::account(*raw, r);
    Runtime::count_call(job.kind, r, t0);
    {
      std::lock_guard lock(state->mu);
      state->result = r;
      state->done = true;
    }
    delete raw;
    state->cv.notify_all();
  };
  Runtime::instance().submit(*raw);
  *out = std::move(f);
  return Error::none();
}

// Gathers are CPU work, a few milliseconds each: as many run at once as loaders keep in flight
// (python/gpufile/_scatter.py keeps 8 of a load in flight).
constexpr unsigned kGatherThreads = 16;

Error File::start_rows(const void* buf, const exec::FileRows& rows, std::unique_ptr<Future>* out) {
  if (fd_ < 0) return Error::sys(EBADF);
  if (Error e = rows.check()) return e;
  const uint64_t t0 = stats::call_started();
  std::unique_ptr<Io> io;
  if (Error e = Runtime::instance().prepare(sys::IoKind::read, handle_, buf, rows.bytes(),
                                            static_cast<int64_t>(rows.first), 0, &io)) {
    Runtime::count_call(sys::IoKind::read, IoResult{0, e}, t0);
    return e;
  }
  exec::RemotePool::instance().allow(kGatherThreads);
  // The task holds the Io (and with it the file's and the session's in-flight counts) until
  // after the Future is done, as start()'s callback does.
  std::shared_ptr<Io> held(io.release());
  *out = Future::spawn([held, rows, t0](std::string*) {
    const IoResult r = Runtime::instance().read_rows(*held, rows);
    Runtime::count_call(sys::IoKind::read, r, t0);
    return r;
  });
  return Error::none();
}

std::optional<bool> File::cached(uint64_t offset, uint64_t length) const {
  if (fd_ < 0 || length == 0) return std::nullopt;
  sys::Residency r;
  if (sys::os().cachestat(fd_, offset, length, &r) != 0) return std::nullopt;
  return r.cached_pages >= r.total_pages;
}

}  // namespace gpufile::api
