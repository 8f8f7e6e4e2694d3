// The open-mode check of File's IO and of IoBatch's ops.
#pragma once

#include "gpufile/file.hpp"
#include "sys/os.hpp"

namespace gpufile::cppapi {

// Throws unless `file` is open and its mode allows the IO: EBADF when closed,
// errc::invalid_open_flag for reads and writes alike otherwise (the runtime answers a write to a
// read-only file with EIO, as NVIDIA's cuFile does; here both directions say the same).
void check_access(const File& file, sys::IoKind kind, const char* what);

}  // namespace gpufile::cppapi
