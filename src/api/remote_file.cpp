#include "api/remote_file.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cuda/memory.hpp"
#include "exec/remote_pool.hpp"
#include "exec/session.hpp"

namespace gpufile::api {

remote::Failure RemoteFile::open(const std::string& url, std::unique_ptr<RemoteFile>* out) {
  remote::Options o;
  if (Error e = Runtime::instance().remote_options(&o))
    return {EIO, url + ": the gpufile driver did not open: " + describe(e)};
  std::unique_ptr<RemoteFile> f(new RemoteFile());
  if (remote::Failure why = remote::Object::open(url, o, &f->object_); !why.ok()) return why;
  // Its Futures run on the remote pool: as many threads as its reads would share.
  exec::RemotePool::instance().allow(exec::remote_threads_for(o.concurrency));
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

// ---- RemoteWriter ----------------------------------------------------------------------------

remote::Failure RemoteWriter::open(const std::string& url, std::unique_ptr<RemoteWriter>* out) {
  remote::Options o;
  if (Error e = Runtime::instance().remote_options(&o))
    return {EIO, url + ": the gpufile driver did not open: " + describe(e)};
  std::unique_ptr<RemoteWriter> w(new RemoteWriter());
  w->part_bytes_ = std::max(o.part_bytes, remote::kMinUploadPart);
  void* mem = nullptr;
  {
    cuda::ScopedAnyContext ctx;  // pinning needs a context on this thread (any thread may open)
    if (Error e = cuda::alloc_pinned(w->part_bytes_, &mem))
      return {ENOMEM, url + ": no pinned memory for a part: " + describe(e)};
  }
  w->part_ = static_cast<char*>(mem);
  if (remote::Failure f = remote::Upload::begin(url, o, &w->upload_); !f.ok()) return f;
  *out = std::move(w);
  return {};
}

RemoteWriter::~RemoteWriter() {
  abort();
  if (part_ != nullptr) {
    cuda::ScopedAnyContext ctx;  // unpinning needs a context on this thread
    cuda::free_pinned(part_, part_bytes_);
  }
}

remote::Failure RemoteWriter::fail(remote::Failure f) {
  abort();
  return f;
}

remote::Failure RemoteWriter::flush_part() {
  if (remote::Failure f = upload_->put_part(part_, filled_); !f.ok()) return fail(std::move(f));
  filled_ = 0;
  return {};
}

IoResult RemoteWriter::write(const void* buf, uint64_t size, remote::Failure* why) {
  if (done_) {
    *why = {EBADF, url() + ": the upload is over (closed, aborted or failed)"};
    return {0, Error::sys(EBADF)};
  }
  cuda::MemInfo mem;
  if (Error e = cuda::classify(buf, &mem)) return {0, e};
  cuda::ScopedContext ctx(mem.needs_staging() ? mem.context : nullptr);
  const char* from = static_cast<const char*>(buf);
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(size - done, part_bytes_ - filled_);
    if (mem.needs_staging()) {
      const cuda::CUresult r = cuda::driver()->MemcpyDtoH(
          part_ + filled_, reinterpret_cast<cuda::CUdeviceptr>(from + done), n);
      if (r != cuda::CUDA_SUCCESS) {
        *why = fail({EIO, url() + ": copy from the GPU failed: " + cuda::describe(r)});
        return {0, Error::sys(EIO)};
      }
    } else {
      std::memcpy(part_ + filled_, from + done, n);
    }
    filled_ += n;
    done += n;
    if (filled_ == part_bytes_) {
      if (remote::Failure f = flush_part(); !f.ok()) {
        *why = std::move(f);
        return {0, Error::sys(why->err)};
      }
    }
  }
  written_ += size;
  return {size, Error::none()};
}

remote::Failure RemoteWriter::close() {
  if (done_) return {};
  if (filled_ > 0 || written_ == 0)  // S3 needs one part, even an empty one
    if (remote::Failure f = flush_part(); !f.ok()) return f;
  if (remote::Failure f = upload_->complete(); !f.ok()) return fail(std::move(f));
  done_ = true;
  return {};
}

void RemoteWriter::abort() {
  done_ = true;
  if (upload_) upload_->abort();
}

// ---- listing and deleting --------------------------------------------------------------------

namespace {

remote::Failure session_options(const std::string& url, remote::Options* o) {
  if (Error e = Runtime::instance().remote_options(o))
    return {EIO, url + ": the gpufile driver did not open: " + describe(e)};
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
