// gpufile::File and gpufile::Future over api::File and api::Future (src/api/file.hpp).
#include "gpufile/file.hpp"

#include <fcntl.h>

#include <cstdint>
#include <optional>

#include "api/file.hpp"
#include "capi/stream_op.hpp"
#include "cppapi/access.hpp"
#include "cppapi/future.hpp"
#include "cppapi/raise.hpp"
#include "exec/gather.hpp"

namespace gpufile {

namespace {

// The runtime takes signed buffer offsets; one past INT64_MAX is no offset into real memory.
int64_t checked_buf_offset(std::size_t buf_offset) {
  if (buf_offset > static_cast<std::size_t>(INT64_MAX))
    cppapi::raise(errc::invalid_argument, "buf_offset is too large");
  return static_cast<int64_t>(buf_offset);
}

int flags_of(std::string_view mode, const std::string& path) {
  std::optional<int> flags = api::open_flags(mode);
  if (!flags)
    cppapi::raise(errc::invalid_argument, "open " + path + ": invalid mode '" +
                                              std::string(mode) +
                                              "' (use r, r+, w, w+, x, x+, a or a+)");
  return *flags;
}

const char* name_of(sys::IoKind kind) { return kind == sys::IoKind::read ? "read" : "write"; }

[[noreturn]] void raise_closed(const char* what, const std::string& path) {
  cppapi::raise(Error::sys(EBADF), std::string(what) + " (the File is closed)", path);
}

}  // namespace

// ---- Future ----------------------------------------------------------------------------------

Future::Future() noexcept = default;
Future::Future(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Future::~Future() = default;  // ~api::Future waits for a running IO
Future::Future(Future&& other) noexcept = default;
Future& Future::operator=(Future&& other) noexcept = default;  // the old one's ~api::Future waits

bool Future::valid() const noexcept { return impl_ != nullptr; }

bool Future::done() const { return Impl::io_of(impl_, "Future::done").done(); }

void Future::wait() const { Impl::io_of(impl_, "Future::wait").wait(); }

bool Future::wait_for(std::chrono::nanoseconds timeout) const {
  return Impl::io_of(impl_, "Future::wait_for").wait_for(timeout);
}

std::size_t Future::get() const {
  IoResult r = Impl::io_of(impl_, "Future::get").wait();
  // Remote reads say what happened in a sentence of their own (it names the URL).
  if (!r.ok() && !impl_->io->message().empty()) cppapi::raise_text(r.error, impl_->io->message());
  if (!r.ok()) cppapi::raise(r.error, name_of(impl_->kind), impl_->path);
  return r.bytes;
}

// ---- StreamFuture ------------------------------------------------------------------------------

struct StreamFuture::Impl {
  std::unique_ptr<capi::StreamOp> op;
  std::string path;
  sys::IoKind kind = sys::IoKind::read;

  static const Impl& of(const std::unique_ptr<Impl>& impl, const char* what) {
    if (!impl) cppapi::raise(errc::invalid_argument, std::string(what) + ": the StreamFuture holds no IO");
    return *impl;
  }
  const char* what() const { return kind == sys::IoKind::read ? "read_async" : "write_async"; }
};

StreamFuture::StreamFuture() noexcept = default;
StreamFuture::StreamFuture(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
StreamFuture::~StreamFuture() = default;  // ~StreamOp waits for the stream
StreamFuture::StreamFuture(StreamFuture&& other) noexcept = default;
StreamFuture& StreamFuture::operator=(StreamFuture&& other) noexcept = default;

bool StreamFuture::valid() const noexcept { return impl_ != nullptr; }

bool StreamFuture::done() const { return Impl::of(impl_, "StreamFuture::done").op->done(); }

void StreamFuture::wait() const {
  const Impl& f = Impl::of(impl_, "StreamFuture::wait");
  if (cuda::CUresult r = f.op->wait(); r != cuda::CUDA_SUCCESS)
    cppapi::raise(Error::cu(r), "StreamFuture::wait: waiting for the stream", f.path);
}

std::size_t StreamFuture::get() const {
  const Impl& f = Impl::of(impl_, "StreamFuture::get");
  IoResult r = f.op->result();
  if (!r.ok()) cppapi::raise(r.error, f.what(), f.path);
  return r.bytes;
}

// ---- File ------------------------------------------------------------------------------------

struct File::Impl {
  std::unique_ptr<api::File> file;
  int access = O_RDONLY;  // O_RDONLY, O_WRONLY or O_RDWR
};

namespace cppapi {

Error access_error(const File& file, sys::IoKind kind) {
  if (file.closed()) return Error::sys(EBADF);
  const bool allowed = kind == sys::IoKind::read ? file.readable() : file.writable();
  return allowed ? Error::none() : Error::of(Errc::invalid_open_flag);
}

}  // namespace cppapi

namespace {

// Throws unless the File can take the IO.
void check_access(const File& file, sys::IoKind kind, const char* what) {
  if (Error e = cppapi::access_error(file, kind)) cppapi::raise(e, what, file.path());
}

}  // namespace

File::File() noexcept = default;

File::File(const std::string& path, std::string_view mode, unsigned permissions)
    : File(path, flags_of(mode, path), permissions) {}

File::File(const std::string& path, int flags, unsigned permissions)
    : impl_(std::make_unique<Impl>()) {
  impl_->access = flags & O_ACCMODE;
  if (Error e = api::File::open(path, flags, static_cast<mode_t>(permissions), &impl_->file))
    cppapi::raise(e, "open", path);
}

File::~File() = default;  // ~api::File closes, ignoring a failure
File::File(File&& other) noexcept = default;
File& File::operator=(File&& other) noexcept = default;

void File::close() {
  if (closed()) return;
  if (Error e = impl_->file->close()) cppapi::raise(e, "close", path());
}

bool File::closed() const noexcept { return !impl_ || !impl_->file || impl_->file->closed(); }

bool File::readable() const noexcept { return !closed() && impl_->access != O_WRONLY; }

bool File::writable() const noexcept { return !closed() && impl_->access != O_RDONLY; }

const std::string& File::path() const noexcept {
  static const std::string none;
  return impl_ && impl_->file ? impl_->file->path() : none;
}

int File::fd() const {
  if (closed()) raise_closed("fd", path());
  return impl_->file->fd();
}

void* File::handle() const {
  if (closed()) raise_closed("handle", path());
  return impl_->file->handle();
}

std::uint64_t File::size() const {
  if (closed()) raise_closed("size", path());
  uint64_t n = 0;
  if (Error e = impl_->file->size(&n)) cppapi::raise(e, "size", path());
  return n;
}

std::size_t File::read(void* buf, std::size_t size, std::int64_t file_offset,
                       std::size_t buf_offset) {
  check_access(*this, sys::IoKind::read, "read");
  IoResult r = impl_->file->read(buf, size, file_offset, checked_buf_offset(buf_offset));
  if (!r.ok()) cppapi::raise(r.error, "read", path());
  return r.bytes;
}

std::size_t File::write(const void* buf, std::size_t size, std::int64_t file_offset,
                        std::size_t buf_offset) {
  check_access(*this, sys::IoKind::write, "write");
  IoResult r = impl_->file->write(buf, size, file_offset, checked_buf_offset(buf_offset));
  if (!r.ok()) cppapi::raise(r.error, "write", path());
  return r.bytes;
}

Future File::start(bool write, const void* buf, std::size_t size, std::int64_t file_offset,
                   std::size_t buf_offset) {
  const sys::IoKind kind = write ? sys::IoKind::write : sys::IoKind::read;
  const char* what = write ? "pwrite" : "pread";
  check_access(*this, kind, what);
  auto future = std::make_unique<Future::Impl>();
  future->path = path();
  future->kind = kind;
  if (Error e = impl_->file->start(kind, buf, size, file_offset, &future->io,
                                   checked_buf_offset(buf_offset)))
    cppapi::raise(e, what, path());
  return Future(std::move(future));
}

StreamFuture File::start_on_stream(bool write, const void* buf, std::size_t size,
                                   std::int64_t file_offset, std::size_t buf_offset,
                                   CUstream_st* stream) {
  const sys::IoKind kind = write ? sys::IoKind::write : sys::IoKind::read;
  const char* what = write ? "write_async" : "read_async";
  check_access(*this, kind, what);
  if (cuda::driver() == nullptr)
    cppapi::raise(Error::of(Errc::driver_not_open), std::string(what) + " needs a CUDA driver",
                  path());
  auto f = std::make_unique<StreamFuture::Impl>();
  f->path = path();
  f->kind = kind;
  if (Error e = capi::StreamOp::start(kind, handle(), const_cast<void*>(buf), size, file_offset,
                                      checked_buf_offset(buf_offset), stream, &f->op))
    cppapi::raise(e, what, path());
  return StreamFuture(std::move(f));
}

StreamFuture File::read_async(void* buf, std::size_t size, std::int64_t file_offset,
                              std::size_t buf_offset, CUstream_st* stream) {
  return start_on_stream(false, buf, size, file_offset, buf_offset, stream);
}

StreamFuture File::write_async(const void* buf, std::size_t size, std::int64_t file_offset,
                               std::size_t buf_offset, CUstream_st* stream) {
  return start_on_stream(true, buf, size, file_offset, buf_offset, stream);
}

Future File::pread(void* buf, std::size_t size, std::int64_t file_offset,
                   std::size_t buf_offset) {
  return start(false, buf, size, file_offset, buf_offset);
}

Future File::pread_rows(void* buf, const FileRows& rows) {
  check_access(*this, sys::IoKind::read, "pread_rows");
  auto future = std::make_unique<Future::Impl>();
  future->path = path();
  future->kind = sys::IoKind::read;
  const exec::FileRows r{rows.first, rows.run, rows.counts, rows.strides};
  if (Error e = impl_->file->start_rows(buf, r, &future->io))
    cppapi::raise(e, "pread_rows", path());
  return Future(std::move(future));
}

Future File::pwrite(const void* buf, std::size_t size, std::int64_t file_offset,
                    std::size_t buf_offset) {
  return start(true, buf, size, file_offset, buf_offset);
}

}  // namespace gpufile
