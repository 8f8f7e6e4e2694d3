#include "api/remote_file.hpp"

#include <chrono>

#include "exec/session.hpp"

namespace gpufile::api {

remote::Failure RemoteFile::open(const std::string& url, std::unique_ptr<RemoteFile>* out) {
  remote::Options o;
  if (Error e = Runtime::instance().remote_options(&o))
    return {EIO, url + ": the gpufile driver did not open: " + describe(e)};
  std::unique_ptr<RemoteFile> f(new RemoteFile());
  if (remote::Failure why = remote::Object::open(url, o, &f->object_); !why.ok()) return why;
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
  const auto t0 = std::chrono::steady_clock::now();
  IoResult r = Runtime::instance().read_remote(*object_, buf, size, offset, why);
  Runtime::count_call(sys::IoKind::read, r, t0);
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
    const auto t0 = std::chrono::steady_clock::now();
    remote::Failure why;
    IoResult r = Runtime::instance().read_remote(*obj, buf, size, offset, &why);
    Runtime::count_call(sys::IoKind::read, r, t0);
    *message = std::move(why.message);
    return r;
  });
  return Error::none();
}

}  // namespace gpufile::api
