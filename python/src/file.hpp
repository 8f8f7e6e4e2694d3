// gpufile.File and gpufile.StreamFuture: a local file opened and registered by gpufile, its
// synchronous, Future and CUDA-stream IO, and its rows reads.
#pragma once

#include <nanobind/nanobind.h>

namespace gpufile::py {

void register_file(nanobind::module_ m);

}  // namespace gpufile::py
