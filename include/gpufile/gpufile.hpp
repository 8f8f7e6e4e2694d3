// gpufile's C++20 API: #include <gpufile/gpufile.hpp> and link libgpufile.so
// (find_package(gpufile CONFIG) -> gpufile::gpufile, or pkg-config gpufile). docs/cpp.md.
#pragma once

#include "gpufile/batch.hpp"
#include "gpufile/buffer.hpp"
#include "gpufile/error.hpp"
#include "gpufile/file.hpp"
#include "gpufile/remote.hpp"
#include "gpufile/settings.hpp"
#include "gpufile/stats.hpp"
