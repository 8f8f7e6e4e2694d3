// gpufile.Future: an IO on gpufile's workers (File.pread, RemoteFile.pread, RemoteWriter.pwrite,
// ...) with the memory it uses, held until the IO finished.
#pragma once

#include <nanobind/nanobind.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "api/file.hpp"
#include "buffer.hpp"
#include "errors.hpp"

namespace gpufile::py {

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

}  // namespace gpufile::py
