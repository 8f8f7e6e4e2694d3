// gpufile::Future's insides, shared by the File and RemoteFile that make Futures.
#pragma once

#include <memory>
#include <string>

#include "api/file.hpp"
#include "cppapi/raise.hpp"
#include "gpufile/file.hpp"

namespace gpufile {

struct Future::Impl {
  std::unique_ptr<api::Future> io;
  std::string path;  // for the error's message
  sys::IoKind kind = sys::IoKind::read;

  // The IO of a Future, or errc::invalid_argument for one that holds none.
  static api::Future& io_of(const std::unique_ptr<Impl>& impl, const char* what) {
    if (!impl)
      cppapi::raise(errc::invalid_argument, std::string(what) + ": the Future holds no IO");
    return *impl->io;
  }
};

}  // namespace gpufile
