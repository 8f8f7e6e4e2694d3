#include "file.hpp"

#include <fcntl.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/file.hpp"
#include "buffer.hpp"
#include "capi/stream_op.hpp"
#include "cuda/driver.hpp"
#include "errors.hpp"
#include "exec/gather.hpp"
#include "futures.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace gpufile::py {
namespace {

// Python's modes (api::open_flags: never O_APPEND, which cuFile refuses).
int open_flags(const std::string& mode) {
  if (std::optional<int> flags = api::open_flags(mode)) return *flags;
  throw nb::value_error(("invalid mode '" + mode + "': use r, r+, w, w+, x, x+, a or a+").c_str());
}

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
  // The rows, or a ValueError that says what is wrong with them (exec::FileRows::problem).
  static exec::FileRows checked_rows(uint64_t run, const std::vector<uint64_t>& counts,
                                     const std::vector<uint64_t>& strides, uint64_t file_offset) {
    exec::FileRows rows{file_offset, run, counts, strides};
    if (const std::string why = rows.problem(); !why.empty()) throw nb::value_error(why.c_str());
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

}  // namespace

void register_file(nb::module_ m) {
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
}

}  // namespace gpufile::py
