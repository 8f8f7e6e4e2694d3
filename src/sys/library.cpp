#include "sys/library.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace gpufile::sys {

Library load_library(const char* env_var, const char* default_name) {
  Library lib;
  const char* path = std::getenv(env_var);
  lib.path = path != nullptr && *path != '\0' ? path : default_name;
  lib.handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib.handle == nullptr) {
    const char* err = dlerror();
    lib.error = err != nullptr ? err : "unknown reason";
  }
  return lib;
}

}  // namespace gpufile::sys
