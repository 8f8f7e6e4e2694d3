// A remote object (http://, https://, s3://), read with many ranged GETs in flight on one
// libcurl multi handle: connections are reused between parts and between reads, HTTP/2 is used
// where the server offers it (parts then share one connection).
//
// The object is pinned at open: its size and ETag come from a HEAD request, and every later
// range carries If-Match with that ETag, so a replaced object fails the read (ESTALE) instead
// of mixing two versions. Each part is checked on arrival (status, Content-Range, ETag, byte
// count) before it counts; failed parts are retried with exponential backoff (policy.hpp).
//
// Where the bytes go is the PartSink's business: host memory takes them in place, GPU memory
// through pinned staging (src/exec/remote.cpp). This layer knows no CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/remote/policy.hpp"
#include "io/remote/request.hpp"

namespace gpufile::remote {

// Where the bytes of the parts of one fetch land.
class PartSink {
 public:
  virtual ~PartSink() = default;
  // Memory for all of part `index`'s bytes; nullptr when none is free now (the part waits until
  // another one landed or was dropped). Never nullptr while no part holds memory.
  virtual char* begin(size_t index, const Part& part) = 0;
  // The part's bytes are all in `mem` and checked. A failure ends the fetch.
  virtual Failure landed(size_t index, const Part& part, char* mem) = 0;
  // The part failed (it will be tried again, or the fetch ends): `mem` is free again.
  virtual void dropped(size_t index, char* mem) = 0;
  // Called once at the end of a fetch, success or not: every landed part is in place when it
  // returns (GPU copies waited for).
  virtual Failure finish() = 0;
};

class Object {
 public:
  // Resolves the URL (s3:// through aws.hpp's sources), loads libcurl, and pins the object with
  // a HEAD request.
  static Failure open(const std::string& url, const Options& options,
                      std::shared_ptr<Object>* out);
  ~Object();
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  const std::string& url() const { return url_; }
  uint64_t size() const { return size_; }
  const std::string& etag() const { return etag_; }

  // Reads [offset, offset + length), which must lie within size(), as parts of
  // o.part_bytes through `sink`, at most o.concurrency at a time, retried and timed as `o` says
  // (the settings of the session the read runs in). Thread-safe: concurrent fetches use
  // separate multi handles. Once `*stop` is set (another share of the same read failed), ends
  // its transfers and returns ECANCELED.
  Failure fetch(uint64_t offset, uint64_t length, const Options& o, PartSink& sink,
                const std::atomic<bool>* stop = nullptr);

 private:
  struct Client;   // a multi handle and its easy handles, for one fetch at a time
  class Fetch;
  Object() = default;
  Failure head();
  // The size and ETag from a GET of the first byte, for a server that refuses HEAD.
  Failure probe_by_range();
  // One request on `e` (set up by `setup`), retried as parts are; `settle` reads a finished
  // reply: true when it gave the size and ETag, else it sets the reply's verdict.
  Failure ask(const char* what, const std::function<void(CURL*, Response*)>& setup,
              const std::function<bool(CURL*, CURLcode, const Response&, Verdict*)>& settle);
  std::unique_ptr<Client> take_client();
  void give_client(std::unique_ptr<Client> c);

  std::string url_;  // as the user gave it
  Options options_;  // the HEAD request's
  std::unique_ptr<Request> request_;
  uint64_t size_ = 0;
  std::string etag_;
  std::mutex clients_mu_;
  std::vector<std::unique_ptr<Client>> clients_;  // idle ones, their connections kept open
};

}  // namespace gpufile::remote
