// GPUFILE_API marks what libgpufile.so exports. The library is built with hidden visibility, so
// only declarations carrying it (and listed by src/capi/libgpufile.map) reach its users.
#pragma once

#if defined(__GNUC__)
#define GPUFILE_API __attribute__((visibility("default")))
#else
#define GPUFILE_API
#endif
