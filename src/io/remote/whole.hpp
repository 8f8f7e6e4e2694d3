// A whole remote object in one GET, without the HEAD that opening an Object (object.hpp) sends
// first: for objects read whole and at once, such as gpufile.zarr's chunks, where the HEAD
// would be half the round trips. The size comes with the reply (Content-Length), and the bytes
// are checked against it; a missing object is ENOENT as for an open.
#pragma once

#include <cstdint>
#include <string>

#include "io/remote/request.hpp"

namespace gpufile::remote {

struct WholeObject {
  std::string bytes;
  std::string etag;  // of the reply ("" when it had none)
};

// GETs `url` (http://, https://, s3://) whole, retried and timed as `o` says. An object of more
// than `max_bytes` fails with EFBIG (nothing kept).
Failure get_whole(const std::string& url, const Options& o, uint64_t max_bytes, WholeObject* out);

}  // namespace gpufile::remote
