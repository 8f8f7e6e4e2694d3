// One S3 request that moves no object bytes to the caller's memory: the requests of an upload
// (upload.hpp) and the bucket's own (bucket.hpp: listing keys, deleting an object). Sent on one
// easy handle (its connection reused), retried with backoff as reads are (policy.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "io/remote/request.hpp"

namespace gpufile::remote {

struct Reply {
  Response response;
  std::string body;  // kept whole: S3's XML answers
};

struct Call {
  const char* method = "GET";  // GET, PUT, POST or DELETE
  std::string query;           // canonical already (names sorted, values encoded); may be empty
  const char* body = nullptr;  // sent for PUT and POST
  uint64_t len = 0;
};

// Sends `call` to `request`'s URL; `name` (the s3:// URL) starts the failure's sentence. A 2xx
// reply is success; 404 reads "no such bucket" (S3 answers a missing key of these requests
// otherwise).
Failure send(CURL* easy, const Request& request, const Options& options, const std::string& name,
             const Call& call, Reply* reply);

// The text of <Tag>...</Tag> in an S3 reply, or "".
std::string xml_value(const std::string& body, const std::string& tag);

}  // namespace gpufile::remote
