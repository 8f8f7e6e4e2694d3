#include "remote.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>

#include "api/remote_file.hpp"
#include "buffer.hpp"
#include "core/redact.hpp"
#include "errors.hpp"
#include "futures.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace gpufile::py {
namespace {

// An api::RemoteFile or RemoteWriter, opened with the GIL released; a failure is its OSError.
template <class T>
std::unique_ptr<T> open_remote(const std::string& url) {
  std::unique_ptr<T> out;
  remote::Failure f;
  {
    nb::gil_scoped_release unlocked;
    f = T::open(url, &out);
  }
  if (!f.ok()) raise_os(f.err, f.message, url);
  return out;
}

// A failed remote IO: its own sentence when it has one.
[[noreturn]] void raise_remote(const IoResult& r, const remote::Failure& why, const char* what,
                               const std::string& url) {
  if (!why.ok()) raise_os(why.err, why.message, url);
  raise(r.error, what, url.c_str());
}

// An http://, https:// or s3:// object: File's read side (docs/remote.md).
class PyRemoteFile {
 public:
  explicit PyRemoteFile(const std::string& url)
      : url_(url), file_(open_remote<api::RemoteFile>(url)) {}
  ~PyRemoteFile() {
    nb::gil_scoped_release unlocked;
    file_.reset();
  }

  void close() {
    nb::gil_scoped_release unlocked;
    if (file_) file_->close();
  }
  bool closed() const { return !file_ || file_->closed(); }
  const std::string& url() const { return url_; }
  uint64_t size() const {
    check_open();
    return file_->size();
  }
  const std::string& etag() const {
    check_open();
    return file_->etag();
  }

  uint64_t read(nb::handle buf, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
    check_open();
    auto b = Buffer::acquire(buf, true);
    const uint64_t n = span(*b, size, buf_offset);
    IoResult r;
    remote::Failure why;
    {
      nb::gil_scoped_release unlocked;
      r = file_->read(reinterpret_cast<void*>(b->addr() + buf_offset), n, offset(file_offset), &why);
    }
    if (!r.ok()) raise_remote(r, why, "read", url_);
    return r.bytes;
  }

  PyFuture* pread(nb::handle buf, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
    check_open();
    auto b = Buffer::acquire(buf, true);
    const uint64_t n = span(*b, size, buf_offset);
    const uintptr_t at = b->addr() + buf_offset;
    return start(at, n, file_offset, std::move(b));
  }

  PyFuture* pread_ptr(uintptr_t addr, uint64_t size, int64_t file_offset) {
    check_open();
    return start(addr, size, file_offset, nullptr);
  }

 private:
  void check_open() const {
    if (closed()) throw nb::value_error("I/O operation on closed gpufile.RemoteFile");
  }
  static uint64_t offset(int64_t file_offset) {
    if (file_offset < 0) throw nb::value_error("file_offset must not be negative");
    return static_cast<uint64_t>(file_offset);
  }
  PyFuture* start(uintptr_t addr, uint64_t n, int64_t file_offset, std::unique_ptr<Buffer> b) {
    const uint64_t at = offset(file_offset);
    std::unique_ptr<api::Future> f;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = file_->start(reinterpret_cast<void*>(addr), n, at, &f);
    }
    if (e) raise(e, "pread", url_.c_str());
    return new PyFuture(std::move(f), std::move(b), url_);
  }

  std::string url_;
  std::unique_ptr<api::RemoteFile> file_;
};

// A new s3:// object, written front to back (multipart upload); it appears when closed.
class PyRemoteWriter {
 public:
  explicit PyRemoteWriter(const std::string& url)
      : url_(url), writer_(open_remote<api::RemoteWriter>(url)) {}
  ~PyRemoteWriter() {
    nb::gil_scoped_release unlocked;
    writer_.reset();  // aborts an upload that was not closed
  }

  uint64_t write(nb::handle buf, std::optional<uint64_t> size, uint64_t buf_offset) {
    auto b = Buffer::acquire(buf, false);
    const uint64_t n = span(*b, size, buf_offset);
    IoResult r;
    remote::Failure why;
    {
      nb::gil_scoped_release unlocked;
      r = writer_->write(reinterpret_cast<const void*>(b->addr() + buf_offset), n, &why);
    }
    if (!r.ok()) raise_remote(r, why, "write", url_);
    made_ += r.bytes;
    return r.bytes;
  }
  // File.pwrite's shape for an object written front to back: the write is appended after every
  // write made before it; `file_offset`, when given, must be where it lands (the bytes of the
  // writes made so far), so that code writing a file in order with pwrite writes objects too.
  PyFuture* pwrite(nb::handle buf, std::optional<uint64_t> size, std::optional<int64_t> file_offset,
                   uint64_t buf_offset) {
    auto b = Buffer::acquire(buf, false);
    const uint64_t n = span(*b, size, buf_offset);
    const uintptr_t at = b->addr() + buf_offset;
    return start(at, n, file_offset, std::move(b));
  }
  PyFuture* pwrite_ptr(uintptr_t addr, uint64_t size, std::optional<int64_t> file_offset) {
    return start(addr, size, file_offset, nullptr);
  }
  void close() {
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = writer_->close();
    }
    if (!f.ok()) raise_os(f.err, f.message, url_);
  }
  // close() on the remote pool after the writes made before it: a Future of the object's size.
  PyFuture* close_async() {
    std::unique_ptr<api::Future> f;
    {
      nb::gil_scoped_release unlocked;
      writer_->start_close(&f);
    }
    return new PyFuture(std::move(f), nullptr, url_);
  }
  void abort() {
    nb::gil_scoped_release unlocked;
    writer_->abort();
  }
  bool closed() const { return writer_->closed(); }
  bool aborted() const { return writer_->aborted(); }
  uint64_t written() const { return writer_->written(); }
  const std::string& url() const { return url_; }

 private:
  PyFuture* start(uintptr_t addr, uint64_t n, std::optional<int64_t> file_offset,
                  std::unique_ptr<Buffer> b) {
    if (file_offset && *file_offset != static_cast<int64_t>(made_))
      throw nb::value_error(("an s3:// object is written front to back: this write lands at " +
                             std::to_string(made_) + ", not at file_offset " +
                             std::to_string(*file_offset))
                                .c_str());
    std::unique_ptr<api::Future> f;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = writer_->start(reinterpret_cast<const void*>(addr), n, &f);
    }
    if (e) raise_os(e.sys_errno, redact_url(url_) + ": pwrite: the upload is over (closed, aborted or failed)", url_);
    made_ += n;
    return new PyFuture(std::move(f), std::move(b), url_);
  }

  std::string url_;
  std::unique_ptr<api::RemoteWriter> writer_;
  uint64_t made_ = 0;  // bytes of the writes made so far, done or not: where the next one lands
};

}  // namespace

void register_remote(nb::module_ m) {
  nb::class_<PyRemoteFile>(m, "RemoteFile",
                           "An http://, https:// or s3:// object, read-only (docs/remote.md).")
      .def(nb::init<const std::string&>(), "url"_a)
      .def("close", &PyRemoteFile::close, "Waits for reads in flight; later reads raise ValueError.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyRemoteFile& f, nb::args) { f.close(); })
      .def_prop_ro("closed", &PyRemoteFile::closed)
      .def_prop_ro("mode", [](const PyRemoteFile&) { return std::string("r"); })
      .def_prop_ro("name", &PyRemoteFile::url)
      .def_prop_ro("etag", &PyRemoteFile::etag, "The ETag the object had at open (every read checks it).")
      .def("size", &PyRemoteFile::size, "The object's size in bytes, as it was at open.")
      .def("read", &PyRemoteFile::read, "buf"_a, "size"_a = nb::none(), "file_offset"_a = 0,
           "buf_offset"_a = 0)
      .def("pread", &PyRemoteFile::pread, "buf"_a, "size"_a = nb::none(), "file_offset"_a = 0,
           "buf_offset"_a = 0, nb::rv_policy::take_ownership)
      .def("pread_ptr", &PyRemoteFile::pread_ptr, "ptr"_a, "size"_a, "file_offset"_a = 0,
           nb::rv_policy::take_ownership)
      .def("write", [](PyRemoteFile&, nb::args, nb::kwargs) -> uint64_t {
        raise_unsupported("remote objects are read-only");
      })
      .def("pwrite", [](PyRemoteFile&, nb::args, nb::kwargs) -> PyFuture* {
        raise_unsupported("remote objects are read-only");
      });

  nb::class_<PyRemoteWriter>(m, "RemoteWriter",
                             "A new s3:// object, written front to back; it appears when closed "
                             "(docs/remote.md).")
      .def(nb::init<const std::string&>(), "url"_a)
      .def("write", &PyRemoteWriter::write, "buf"_a, "size"_a = nb::none(), "buf_offset"_a = 0,
           "Appends the bytes of any GPU or host buffer; returns how many.")
      .def("pwrite", &PyRemoteWriter::pwrite, "buf"_a, "size"_a = nb::none(),
           "file_offset"_a = nb::none(), "buf_offset"_a = 0, nb::rv_policy::take_ownership,
           "Appends like write, returning at once: a Future, done once the bytes are copied out "
           "of buf. Writes land in the order made; file_offset, if given, must be where this one "
           "lands.")
      .def("pwrite_ptr", &PyRemoteWriter::pwrite_ptr, "ptr"_a, "size"_a,
           "file_offset"_a = nb::none(), nb::rv_policy::take_ownership)
      .def("close", &PyRemoteWriter::close, "Sends the rest and completes the upload.")
      .def("close_async", &PyRemoteWriter::close_async, nb::rv_policy::take_ownership,
           "close, returning at once: a Future whose result() is the object's size once it "
           "exists, or raises what failed the upload. Runs after the writes made before it; "
           "later writes are refused.")
      .def("abort", &PyRemoteWriter::abort,
           "Drops what was written: the object is not made. After close_async it waits for that "
           "close instead and leaves its object.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyRemoteWriter& w, nb::args exc) {
        if (exc.size() > 0 && !exc[0].is_none()) w.abort();  // nothing half-written appears
        // A write or pwrite that failed in the block (its exception caught, or its Future never
        // asked) fails the close again: leaving the block is no sign the object was made.
        else if (!w.aborted()) w.close();
      })
      .def_prop_ro("closed", &PyRemoteWriter::closed)
      .def_prop_ro("mode", [](const PyRemoteWriter&) { return std::string("w"); })
      .def_prop_ro("name", &PyRemoteWriter::url)
      .def("tell", &PyRemoteWriter::written, "Bytes written so far.");
}

}  // namespace gpufile::py
