// gpufile.RemoteFile and gpufile.RemoteWriter: http://, https:// and s3:// objects read into, and
// s3:// objects written from, GPU or host memory (docs/remote.md).
#pragma once

#include <nanobind/nanobind.h>

namespace gpufile::py {

void register_remote(nanobind::module_ m);

}  // namespace gpufile::py
