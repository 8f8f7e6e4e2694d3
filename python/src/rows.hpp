// Helpers of gpufile.hdf5's chunked reads: where a buffer lives (_memory_of), and placing rows
// between CUDA-reachable memory with pitched copies (_copy_rows), so a chunk read into device
// staging reaches its place in a GPU array without a trip through host memory.
#pragma once

#include <nanobind/nanobind.h>

namespace gpufile::py {

void register_rows(nanobind::module_ m);

}  // namespace gpufile::py
