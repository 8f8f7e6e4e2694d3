// The open-mode check of File's IO and of IoBatch's ops.
#pragma once

#include "core/error.hpp"
#include "gpufile/file.hpp"
#include "sys/os.hpp"

namespace gpufile::cppapi {

// Why `file` cannot take the IO, or none: EBADF when closed, else invalid_open_flag when its
// mode does not allow it, for reads and writes alike (the runtime answers a write to a
// read-only file with EIO, as NVIDIA's cuFile does; the C++ API says the same both ways).
Error access_error(const File& file, sys::IoKind kind);

}  // namespace gpufile::cppapi
