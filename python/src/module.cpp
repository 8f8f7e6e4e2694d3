// gpufile._gpufile: the Python extension. Files, futures, stream IO, device buffers, settings
// and statistics, over the same runtime that serves the cuFile API. IO releases the GIL.
#include <fcntl.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>

#include "api/file.hpp"
#include "api/remote_file.hpp"
#include "capi/capi.hpp"
#include "capi/stream_op.hpp"
#include "buffer.hpp"
#include "core/config.hpp"
#include "core/redact.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "device_buffer.hpp"
#include "errors.hpp"
#include "exec/gather.hpp"
#include "exec/runtime.hpp"
#include "rows.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace gpufile::py {
namespace {

// ---- open modes ------------------------------------------------------------------------------

// Python's modes (api::open_flags: never O_APPEND, which cuFile refuses).
int open_flags(const std::string& mode) {
  if (std::optional<int> flags = api::open_flags(mode)) return *flags;
  throw nb::value_error(("invalid mode '" + mode + "': use r, r+, w, w+, x, x+, a or a+").c_str());
}

// ---- futures ---------------------------------------------------------------------------------

// An IO on the workers, with the memory it uses held until it finished.
class PyFuture {
 public:
  PyFuture(std::unique_ptr<api::Future> f, std::unique_ptr<Buffer> b, std::string what = "")
      : future_(std::move(f)), buffer_(std::move(b)), what_(std::move(what)) {}
  ~PyFuture() {
    {
      nb::gil_scoped_release unlocked;
      future_.reset();  // waits for the IO
    }
    buffer_.reset();  // releases the view (GIL held)
  }

  bool done() const { return future_->done(); }

  uint64_t result(std::optional<double> timeout) {
    IoResult r;
    bool finished = true;
    {
      nb::gil_scoped_release unlocked;
      if (timeout)
        finished = future_->wait_for(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(std::max(0.0, *timeout))));
      if (finished) r = future_->wait();
    }
    if (!finished) raise_timeout(*timeout);
    if (!r.ok() && r.error.code == Errc::system && !future_->message().empty())
      raise_os(r.error.sys_errno, future_->message(), what_);
    if (!r.ok()) raise(r.error, "IO");
    buffer_.reset();  // the IO is over: let go of the caller's memory now
    return r.bytes;
  }

 private:
  std::unique_ptr<api::Future> future_;
  std::unique_ptr<Buffer> buffer_;
  std::string what_;  // the file named in failures
};

// A read or write ordered on a CUDA stream (cuFileReadAsync / cuFileWriteAsync, through
// capi::StreamOp, which keeps its parameters and the mark behind it), and the memory it uses.
class StreamFuture {
 public:
  StreamFuture(std::unique_ptr<Buffer> b, std::unique_ptr<capi::StreamOp> op, std::string path)
      : buffer_(std::move(b)), op_(std::move(op)), path_(std::move(path)) {}
  ~StreamFuture() {
    {
      nb::gil_scoped_release unlocked;
      op_.reset();  // waits for the stream to pass the op
    }
    buffer_.reset();
  }

  bool done() { return op_->done(); }

  int64_t result() {
    IoResult r;
    {
      nb::gil_scoped_release unlocked;
      r = op_->result();
    }
    if (!r.ok()) raise(r.error, "stream IO", path_.c_str());
    return static_cast<int64_t>(r.bytes);
  }

 private:
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<capi::StreamOp> op_;
  std::string path_;
};

// A CUDA stream given as an int, or an object with `cuda_stream` (PyTorch), `ptr` (CuPy) or the
// `__cuda_stream__` protocol (returns (version, handle)).
cuda::CUstream stream_of(nb::handle s) {
  if (s.is_none()) return nullptr;
  if (nb::isinstance<nb::int_>(s)) return reinterpret_cast<cuda::CUstream>(nb::cast<uintptr_t>(s));
  if (nb::hasattr(s, "__cuda_stream__")) {
    nb::tuple t = nb::cast<nb::tuple>(s.attr("__cuda_stream__")());
    return reinterpret_cast<cuda::CUstream>(nb::cast<uintptr_t>(t[1]));
  }
  if (nb::hasattr(s, "cuda_stream")) return reinterpret_cast<cuda::CUstream>(nb::cast<uintptr_t>(s.attr("cuda_stream")));
  if (nb::hasattr(s, "ptr")) return reinterpret_cast<cuda::CUstream>(nb::cast<uintptr_t>(s.attr("ptr")));
  throw nb::type_error("stream: expected an int handle, a torch.cuda.Stream, a cupy Stream or an "
                       "object with __cuda_stream__");
}

// ---- files -----------------------------------------------------------------------------------

// As Python's files do for an IO the mode does not allow: io.UnsupportedOperation.
[[noreturn]] void raise_unsupported(const char* message) {
  nb::object unsupported = nb::module_::import_("io").attr("UnsupportedOperation");
  PyErr_SetString(unsupported.ptr(), message);
  throw nb::python_error();
}

  // Bytes to move: `size`, or the rest of the buffer after `buf_offset`; checked against it.
uint64_t span(const Buffer& b, std::optional<uint64_t> size, uint64_t buf_offset) {
  if (buf_offset > b.nbytes())
    throw nb::value_error(("buf_offset " + std::to_string(buf_offset) + " is past the end of the " +
                           std::to_string(b.nbytes()) + "-byte buffer").c_str());
  const uint64_t room = b.nbytes() - buf_offset;
  if (!size) return room;
  if (*size > room)
    throw nb::value_error(("size " + std::to_string(*size) + " does not fit the buffer: " +
                           std::to_string(room) + " bytes from buf_offset " +
                           std::to_string(buf_offset)).c_str());
  return *size;
}


class PyFile {
 public:
  PyFile(const std::string& path, const std::string& mode) : mode_(mode) {
    const int flags = open_flags(mode);
    access_ = flags & O_ACCMODE;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = api::File::open(path, flags, 0644, &file_);
    }
    if (e) raise(e, "open", path.c_str());
  }
  ~PyFile() {
    nb::gil_scoped_release unlocked;
    file_.reset();
  }

  void close() {
    if (!file_ || file_->closed()) return;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = file_->close();
    }
    if (e) raise(e, "close", file_->path().c_str());
  }
  bool closed() const { return !file_ || file_->closed(); }
  const std::string& mode() const { return mode_; }
  const std::string& path() const { return file_->path(); }
  int fileno() const {
    check_open();
    return file_->fd();
  }
  uintptr_t handle() const {
    check_open();
    return reinterpret_cast<uintptr_t>(file_->handle());
  }
  uint64_t size() const {
    check_open();
    uint64_t n = 0;
    if (Error e = file_->size(&n)) raise(e, "fstat", file_->path().c_str());
    return n;
  }

  uint64_t transfer(sys::IoKind kind, nb::handle buf, std::optional<uint64_t> size,
                    int64_t file_offset, uint64_t buf_offset) {
    check_open(kind);
    auto b = Buffer::acquire(buf, kind == sys::IoKind::read);
    const uint64_t n = span(*b, size, buf_offset);
    IoResult r;
    {
      nb::gil_scoped_release unlocked;
      const uint64_t at = b->addr() + buf_offset;
      r = kind == sys::IoKind::read ? file_->read(reinterpret_cast<void*>(at), n, file_offset)
                                    : file_->write(reinterpret_cast<const void*>(at), n, file_offset);
    }
    if (!r.ok()) raise(r.error, kind == sys::IoKind::read ? "read" : "write", file_->path().c_str());
    return r.bytes;
  }

  PyFuture* start(sys::IoKind kind, nb::handle buf, std::optional<uint64_t> size,
                  int64_t file_offset, uint64_t buf_offset) {
    check_open(kind);
    auto b = Buffer::acquire(buf, kind == sys::IoKind::read);
    const uint64_t n = span(*b, size, buf_offset);
    const uintptr_t at = b->addr() + buf_offset;  // before b is moved from
    return start_at(kind, at, n, file_offset, std::move(b));
  }

  // Raw addresses: the caller keeps the memory alive until the future is done.
  PyFuture* start_raw(sys::IoKind kind, uintptr_t addr, uint64_t size, int64_t file_offset) {
    check_open(kind);
    return start_at(kind, addr, size, file_offset, nullptr);
  }

  StreamFuture* start_on_stream(sys::IoKind kind, nb::handle buf, nb::handle stream_obj,
                                std::optional<uint64_t> size, int64_t file_offset,
                                uint64_t buf_offset) {
    check_open(kind);
    if (cuda::driver() == nullptr)
      raise(Error::of(Errc::driver_not_open), "stream IO needs a CUDA driver");
    cuda::CUstream stream = stream_of(stream_obj);
    auto b = Buffer::acquire(buf, kind == sys::IoKind::read);
    const uint64_t n = span(*b, size, buf_offset);
    const uintptr_t base = b->addr();
    std::unique_ptr<capi::StreamOp> op;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = capi::StreamOp::start(kind, file_->handle(), reinterpret_cast<void*>(base), n, file_offset,
                                static_cast<int64_t>(buf_offset), stream, &op);
    }
    if (e) raise(e, kind == sys::IoKind::read ? "read_async" : "write_async", file_->path().c_str());
    return new StreamFuture(std::move(b), std::move(op), file_->path());
  }

  // Rows of the file (exec/gather.hpp's FileRows: `run` bytes, counts[k] of them strides[k]
  // apart along each outer dimension, from file_offset) packed into `buf` from buf_offset. The
  // Future holds the buffer until the IO is over.
  PyFuture* start_rows_into(nb::handle buf, uint64_t run, const std::vector<uint64_t>& counts,
                            const std::vector<uint64_t>& strides, uint64_t file_offset,
                            uint64_t buf_offset) {
    check_open(sys::IoKind::read);
    const exec::FileRows rows = checked_rows(run, counts, strides, file_offset);
    auto b = Buffer::acquire(buf, /*writable=*/true);
    span(*b, rows.bytes(), buf_offset);  // a ValueError where the packed rows do not fit
    const uintptr_t at = b->addr() + buf_offset;
    return start_rows_at(at, rows, std::move(b));
  }

  uint64_t read_rows_into(nb::handle buf, uint64_t run, const std::vector<uint64_t>& counts,
                          const std::vector<uint64_t>& strides, uint64_t file_offset,
                          uint64_t buf_offset) {
    std::unique_ptr<PyFuture> f(start_rows_into(buf, run, counts, strides, file_offset, buf_offset));
    return f->result(std::nullopt);
  }

  // The same at a raw address, for the loaders: the caller keeps the memory alive until the
  // Future is done.
  PyFuture* start_rows(uintptr_t addr, uint64_t run, const std::vector<uint64_t>& counts,
                       const std::vector<uint64_t>& strides, uint64_t file_offset) {
    check_open(sys::IoKind::read);
    return start_rows_at(addr, checked_rows(run, counts, strides, file_offset), nullptr);
  }

  std::optional<bool> cached(uint64_t offset, uint64_t length) const {
    check_open();
    return file_->cached(offset, length);
  }

 private:
  // The rows, or a ValueError that says what is wrong with them.
  static exec::FileRows checked_rows(uint64_t run, const std::vector<uint64_t>& counts,
                                     const std::vector<uint64_t>& strides, uint64_t file_offset) {
    if (run == 0) throw nb::value_error("run must be at least 1 byte");
    if (counts.size() != strides.size())
      throw nb::value_error(("counts has " + std::to_string(counts.size()) + " dimensions and strides " +
                             std::to_string(strides.size()) + ": one stride per count").c_str());
    for (uint64_t c : counts)
      if (c == 0) throw nb::value_error("every count must be at least 1");
    exec::FileRows rows{file_offset, run, counts, strides};
    if (rows.check()) throw nb::value_error("the rows reach past the largest file offset (2**63)");
    return rows;
  }

  PyFuture* start_rows_at(uintptr_t addr, const exec::FileRows& rows, std::unique_ptr<Buffer> b) {
    std::unique_ptr<api::Future> f;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = file_->start_rows(reinterpret_cast<const void*>(addr), rows, &f);
    }
    if (e) raise(e, "pread_rows", file_->path().c_str());
    return new PyFuture(std::move(f), std::move(b), file_->path());
  }

  void check_open() const {
    if (closed()) throw nb::value_error("I/O operation on closed gpufile.File");
  }
  // As Python's own files: io.UnsupportedOperation (an OSError and a ValueError) for an IO the
  // mode does not allow.
  void check_open(sys::IoKind kind) const {
    check_open();
    const bool ok = kind == sys::IoKind::read ? access_ != O_WRONLY : access_ != O_RDONLY;
    if (!ok)
      raise_unsupported(kind == sys::IoKind::read ? "File not open for reading" : "File not open for writing");
  }

  PyFuture* start_at(sys::IoKind kind, uintptr_t addr, uint64_t n, int64_t file_offset,
                     std::unique_ptr<Buffer> b) {
    std::unique_ptr<api::Future> f;
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = file_->start(kind, reinterpret_cast<const void*>(addr), n, file_offset, &f);
    }
    if (e) raise(e, kind == sys::IoKind::read ? "pread" : "pwrite", file_->path().c_str());
    return new PyFuture(std::move(f), std::move(b));
  }

  std::unique_ptr<api::File> file_;
  std::string mode_;
  int access_ = O_RDONLY;  // O_RDONLY, O_WRONLY or O_RDWR, from the mode once (checked per IO)
};

// ---- remote objects ----------------------------------------------------------------------------

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

// ---- settings and statistics -----------------------------------------------------------------

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

nb::object settings() {
  Runtime& rt = Runtime::instance();
  Settings s = rt.is_open() ? rt.settings() : config::resolve().settings;
  return json_loads(config::settings_json(s));
}

void set_setting(const std::string& key, nb::handle value) {
  if (Runtime::instance().is_open())
    raise_message("settings take effect when the driver opens, and it is open: call "
                  "gpufile.driver_close() first (files opened before stay open but stop working)");
  std::string text = nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(value));
  std::string problem = config::stage_json(key, text);
  if (!problem.empty()) throw nb::value_error(problem.c_str());
}

nb::object stats_dict() {
  // Pinned staging memory held now (slabs of the open driver); 0 after driver_close().
  return json_loads(stats::summary_json(stats::snapshot(), cuda::live_pinned_bytes()));
}

// gpufile.stats() adds the HDF5 plugin's histograms to the extension's, then derives their
// percentiles again through this: one derivation (core/stats) for every report.
nb::object latency_summary(const std::vector<uint64_t>& buckets) {
  if (buckets.size() != stats::kLatencyBuckets)
    throw nb::value_error("a latency histogram has 32 buckets");
  uint64_t hist[stats::kLatencyBuckets];
  std::copy(buckets.begin(), buckets.end(), hist);
  return json_loads(stats::latency_json(hist));
}

}  // namespace
}  // namespace gpufile::py

NB_MODULE(_gpufile, m) {
  using namespace gpufile;
  using namespace gpufile::py;
  m.doc() = "gpufile's extension module; use the gpufile package, not this module";
  m.attr("__version__") = GPUFILE_VERSION;
  register_errors(m);

  nb::class_<PyFuture>(m, "Future", "An IO running on gpufile's workers.")
      .def("done", &PyFuture::done, "True once the IO finished (result() then returns at once).")
      .def("result", &PyFuture::result, "timeout"_a = nb::none(),
           "Waits for the IO; returns the bytes moved (fewer than asked only at end of file for a "
           "read) or raises its error. TimeoutError if `timeout` seconds pass first.");

  nb::class_<StreamFuture>(m, "StreamFuture", "An IO ordered on a CUDA stream.")
      .def("done", &StreamFuture::done, "True once the stream passed the IO.")
      .def("result", &StreamFuture::result,
           "Waits until the stream passed the IO; returns the bytes moved or raises its error.");

  nb::class_<PyFile>(m, "File", "A file opened and registered by gpufile.")
      .def(nb::init<const std::string&, const std::string&>(), "path"_a, "mode"_a = "r")
      .def("close", &PyFile::close, "Waits for IO in flight on the file, then deregisters and closes it.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyFile& f, nb::args) { f.close(); })
      .def_prop_ro("closed", &PyFile::closed)
      .def_prop_ro("mode", &PyFile::mode)
      .def_prop_ro("name", &PyFile::path)
      .def("fileno", &PyFile::fileno)
      .def_prop_ro("handle", &PyFile::handle, "The cuFile handle (CUfileHandle_t) as an int.")
      .def("size", &PyFile::size, "The file's size in bytes now.")
      .def("read",
           [](PyFile& f, nb::handle buf, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
             return f.transfer(sys::IoKind::read, buf, size, file_offset, buf_offset);
           },
           "buf"_a, "size"_a = nb::none(), "file_offset"_a = 0, "buf_offset"_a = 0)
      .def("write",
           [](PyFile& f, nb::handle buf, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
             return f.transfer(sys::IoKind::write, buf, size, file_offset, buf_offset);
           },
           "buf"_a, "size"_a = nb::none(), "file_offset"_a = 0, "buf_offset"_a = 0)
      .def("pread",
           [](PyFile& f, nb::handle buf, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
             return f.start(sys::IoKind::read, buf, size, file_offset, buf_offset);
           },
           "buf"_a, "size"_a = nb::none(), "file_offset"_a = 0, "buf_offset"_a = 0, nb::rv_policy::take_ownership)
      .def("pwrite",
           [](PyFile& f, nb::handle buf, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
             return f.start(sys::IoKind::write, buf, size, file_offset, buf_offset);
           },
           "buf"_a, "size"_a = nb::none(), "file_offset"_a = 0, "buf_offset"_a = 0, nb::rv_policy::take_ownership)
      .def("pread_ptr",
           [](PyFile& f, uintptr_t addr, uint64_t size, int64_t file_offset) {
             return f.start_raw(sys::IoKind::read, addr, size, file_offset);
           },
           "ptr"_a, "size"_a, "file_offset"_a = 0, nb::rv_policy::take_ownership)
      .def("pwrite_ptr",
           [](PyFile& f, uintptr_t addr, uint64_t size, int64_t file_offset) {
             return f.start_raw(sys::IoKind::write, addr, size, file_offset);
           },
           "ptr"_a, "size"_a, "file_offset"_a = 0, nb::rv_policy::take_ownership)
      .def("pread_rows", &PyFile::start_rows_into, "buf"_a, "run"_a, "counts"_a, "strides"_a,
           "file_offset"_a = 0, "buf_offset"_a = 0, nb::rv_policy::take_ownership,
           "Reads rows of `run` bytes, counts[k] of them strides[k] bytes apart along each outer "
           "dimension (outermost first) from file_offset, packed in C order into buf (host or GPU "
           "memory) from buf_offset; a Future of the bytes read, fewer only where the file ends. "
           "A part of a tensor split along its last dimension is one call.")
      .def("read_rows", &PyFile::read_rows_into, "buf"_a, "run"_a, "counts"_a, "strides"_a,
           "file_offset"_a = 0, "buf_offset"_a = 0,
           "pread_rows, waited for: the bytes read.")
      .def("_pread_rows_ptr", &PyFile::start_rows, "ptr"_a, "run"_a, "counts"_a, "strides"_a, "file_offset"_a,
           nb::rv_policy::take_ownership,
           "pread_rows into memory at ptr, which the caller keeps alive until the Future is done.")
      .def("_cached", &PyFile::cached, "offset"_a, "length"_a,
           "Whether the page cache holds every byte of the range; None where the kernel cannot say.")
      .def("read_async",
           [](PyFile& f, nb::handle buf, nb::handle stream, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
             return f.start_on_stream(sys::IoKind::read, buf, stream, size, file_offset, buf_offset);
           },
           "buf"_a, "stream"_a, "size"_a = nb::none(), "file_offset"_a = 0, "buf_offset"_a = 0,
           nb::rv_policy::take_ownership)
      .def("write_async",
           [](PyFile& f, nb::handle buf, nb::handle stream, std::optional<uint64_t> size, int64_t file_offset, uint64_t buf_offset) {
             return f.start_on_stream(sys::IoKind::write, buf, stream, size, file_offset, buf_offset);
           },
           "buf"_a, "stream"_a, "size"_a = nb::none(), "file_offset"_a = 0, "buf_offset"_a = 0,
           nb::rv_policy::take_ownership);

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

  register_device_buffer(m);
  register_rows(m);

  m.def("settings", &settings, "Every setting by its cufile.json key: the open driver's, else what the next open would use.");
  m.def("set_setting", &set_setting, "key"_a, "value"_a,
        "Sets one setting (cufile.json key) for the next driver open; ValueError if refused.");
  m.def("stats", &stats_dict, "Per-operation counters and bytes per data path.");
  m.def("stats_reset", [] { stats::reset(); });
  m.def("_latency_summary", &latency_summary, "buckets"_a,
        "The percentiles of a latency histogram (as in stats()), from its bucket counts.");
  m.def("driver_open", [] {
    if (Error e = Runtime::instance().open()) raise(e, "driver open");
  });
  m.def("driver_close", [] {
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = Runtime::instance().close();
      // As cuFileDriverClose does: read_async/write_async run on the cuFile stream API, whose
      // pinned staging pool would otherwise outlive the driver (found by tests/soak/soak.py).
      if (e.ok() && !Runtime::instance().is_open()) capi::on_driver_closed();
    }
    if (e && e.code != Errc::driver_not_open) raise(e, "driver close");
  });
  m.def("driver_is_open", [] { return Runtime::instance().is_open(); });
  // Opens the session as a file's first IO would, without the GIL, for a loader to run on a
  // thread of its own while it parses headers and allocates (gpufile.safetensors).
  m.def("_open_session", [] {
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = Runtime::instance().ensure_open();
    }
    if (e) raise(e, "driver open");
  });
  m.def("engine", [] {
    if (Error e = Runtime::instance().ensure_open()) raise(e, "driver open");
    return Runtime::instance().engine_name();
  }, "The IO engine of the open driver (io_uring or posix); opens the driver if needed.");
  // s3:// buckets for gpufile.zarr's store: listing and deleting (docs/remote.md). The XML is
  // parsed in Python.
  m.def("_s3_list_page", [](const std::string& url, const std::string& prefix,
                            const std::string& delimiter, const std::string& continuation,
                            unsigned max_keys) {
    remote::ListPage page{prefix, delimiter, continuation, max_keys};
    std::string xml;
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = api::list_objects(url, page, &xml);
    }
    if (!f.ok()) raise_os(f.err, f.message, url);
    return nb::bytes(xml.data(), xml.size());
  }, "url"_a, "prefix"_a, "delimiter"_a, "continuation"_a, "max_keys"_a = 1000,
        "One page of ListObjectsV2 of the bucket of an s3:// URL: the reply's XML.");
  m.def("_s3_delete", [](const std::string& url) {
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = api::delete_object(url);
    }
    if (!f.ok()) raise_os(f.err, f.message, url);
  }, "url"_a, "Deletes an s3:// object (a missing key is no error, as S3 answers).");
  m.def("_remote_get", [](const std::string& url, uint64_t max_bytes) {
    remote::WholeObject whole;
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = api::get_object(url, max_bytes, &whole);
    }
    if (!f.ok()) raise_os(f.err, f.message, url);
    return nb::bytes(whole.bytes.data(), whole.bytes.size());
  }, "url"_a, "max_bytes"_a = UINT64_MAX,
        "A whole http(s):// or s3:// object in one GET, without the HEAD an open sends: its bytes.");
  // The Python layer's messages about URLs (gpufile.safetensors, gpufile.zarr) hide what the C++
  // ones hide, by the same code (src/core/redact.hpp).
  m.def("_redact_url", [](const std::string& url) { return redact_url(url); }, "url"_a,
        "The URL as messages show it: signatures, tokens and passwords replaced by REDACTED.");
  m.def("_redact_text", [](const std::string& text) { return redact_text(text); }, "text"_a,
        "`text` with every URL in it passed through _redact_url.");
  m.def("cuda_available", [] { return cuda::driver() != nullptr; });
  m.def("cuda_unavailable_reason", [] { return cuda::driver() ? std::string() : cuda::why_no_driver(); });
  m.def("device_count", [] {
    const cuda::Driver* d = cuda::driver();
    return d ? d->device_count : 0;
  });
}
