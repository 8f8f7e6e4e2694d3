// Libraries gpufile loads at run time instead of linking (the CUDA driver, NVML, libcurl), so
// that the libraries it builds load on machines that lack them.
#pragma once

#include <string>

namespace gpufile::sys {

struct Library {
  void* handle = nullptr;  // null when it could not be loaded
  std::string path;        // what was tried
  std::string error;       // dlerror()'s text when it could not be loaded
};

// Loads $`env_var` when that is set and not empty, else `default_name`, for good: never
// dlclose'd, since static destructors at exit may still call into it.
Library load_library(const char* env_var, const char* default_name);

}  // namespace gpufile::sys
