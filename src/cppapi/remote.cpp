// gpufile::RemoteFile and RemoteWriter over api::RemoteFile and api::RemoteWriter
// (src/api/remote_file.hpp).
#include "gpufile/remote.hpp"

#include "api/remote_file.hpp"
#include "cppapi/future.hpp"
#include "cppapi/raise.hpp"

namespace gpufile {

namespace {

[[noreturn]] void raise_failure(const remote::Failure& f) {
  cppapi::raise_text(Error::sys(f.err), f.message);
}

}  // namespace

struct RemoteFile::Impl {
  std::unique_ptr<api::RemoteFile> file;
  std::string url;
};

RemoteFile::RemoteFile() noexcept = default;

RemoteFile::RemoteFile(const std::string& url) : impl_(std::make_unique<Impl>()) {
  impl_->url = url;
  if (remote::Failure f = api::RemoteFile::open(url, &impl_->file); !f.ok()) raise_failure(f);
}

RemoteFile::~RemoteFile() = default;  // ~api::RemoteFile waits for reads in flight
RemoteFile::RemoteFile(RemoteFile&& other) noexcept = default;
RemoteFile& RemoteFile::operator=(RemoteFile&& other) noexcept = default;

void RemoteFile::close() {
  if (!closed()) impl_->file->close();
}

bool RemoteFile::closed() const noexcept { return !impl_ || !impl_->file || impl_->file->closed(); }

const std::string& RemoteFile::url() const noexcept {
  static const std::string none;
  return impl_ ? impl_->url : none;
}

std::uint64_t RemoteFile::size() const {
  if (closed()) cppapi::raise(Error::sys(EBADF), "size (the RemoteFile is closed)", url());
  return impl_->file->size();
}

const std::string& RemoteFile::etag() const {
  if (closed()) cppapi::raise(Error::sys(EBADF), "etag (the RemoteFile is closed)", url());
  return impl_->file->etag();
}

std::size_t RemoteFile::read(void* buf, std::size_t size, std::uint64_t offset,
                             std::size_t buf_offset) {
  if (closed()) cppapi::raise(Error::sys(EBADF), "read (the RemoteFile is closed)", url());
  remote::Failure why;
  IoResult r = impl_->file->read(static_cast<char*>(buf) + buf_offset, size, offset, &why);
  if (!r.ok() && !why.ok()) raise_failure(why);
  if (!r.ok()) cppapi::raise(r.error, "read", url());
  return r.bytes;
}

Future RemoteFile::pread(void* buf, std::size_t size, std::uint64_t offset,
                         std::size_t buf_offset) {
  if (closed()) cppapi::raise(Error::sys(EBADF), "pread (the RemoteFile is closed)", url());
  auto future = std::make_unique<Future::Impl>();
  future->path = url();
  if (Error e = impl_->file->start(static_cast<char*>(buf) + buf_offset, size, offset, &future->io))
    cppapi::raise(e, "pread", url());
  return Future(std::move(future));
}

// ---- RemoteWriter ----------------------------------------------------------------------------

struct RemoteWriter::Impl {
  std::unique_ptr<api::RemoteWriter> writer;
  std::string url;
};

RemoteWriter::RemoteWriter() noexcept = default;

RemoteWriter::RemoteWriter(const std::string& url) : impl_(std::make_unique<Impl>()) {
  impl_->url = url;
  if (remote::Failure f = api::RemoteWriter::open(url, &impl_->writer); !f.ok()) raise_failure(f);
}

// ~api::RemoteWriter aborts an upload not closed, or waits for a close_async in flight.
RemoteWriter::~RemoteWriter() = default;
RemoteWriter::RemoteWriter(RemoteWriter&& other) noexcept = default;
RemoteWriter& RemoteWriter::operator=(RemoteWriter&& other) noexcept = default;

bool RemoteWriter::closed() const noexcept {
  return !impl_ || !impl_->writer || impl_->writer->closed();
}

const std::string& RemoteWriter::url() const noexcept {
  static const std::string none;
  return impl_ ? impl_->url : none;
}

std::uint64_t RemoteWriter::tell() const { return impl_ && impl_->writer ? impl_->writer->written() : 0; }

void RemoteWriter::write(const void* buf, std::size_t size) {
  if (!impl_ || !impl_->writer) cppapi::raise(Error::sys(EBADF), "write (the RemoteWriter holds no object)");
  remote::Failure why;
  IoResult r = impl_->writer->write(buf, size, &why);
  if (!r.ok() && !why.ok()) raise_failure(why);
  if (!r.ok()) cppapi::raise(r.error, "write", url());
}

Future RemoteWriter::write_async(const void* buf, std::size_t size) {
  if (!impl_ || !impl_->writer)
    cppapi::raise(Error::sys(EBADF), "write_async (the RemoteWriter holds no object)");
  auto future = std::make_unique<Future::Impl>();
  future->path = url();
  future->kind = sys::IoKind::write;
  if (Error e = impl_->writer->start(buf, size, &future->io))
    cppapi::raise(e, "write_async (the upload is over: closed, aborted or failed)", url());
  return Future(std::move(future));
}

void RemoteWriter::close() {
  if (!impl_ || !impl_->writer) return;
  if (remote::Failure f = impl_->writer->close(); !f.ok()) raise_failure(f);
}

Future RemoteWriter::close_async() {
  if (!impl_ || !impl_->writer)
    cppapi::raise(Error::sys(EBADF), "close_async (the RemoteWriter holds no object)");
  auto future = std::make_unique<Future::Impl>();
  future->path = url();
  future->kind = sys::IoKind::write;
  impl_->writer->start_close(&future->io);
  return Future(std::move(future));
}

void RemoteWriter::abort() {
  if (impl_ && impl_->writer) impl_->writer->abort();
}

}  // namespace gpufile
