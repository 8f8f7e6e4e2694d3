// The pure decisions of a remote read: how a byte range is cut into ranged GETs, what a
// response means, and how long to wait before trying again. tests/unit/test_remote.cpp.
#pragma once

#include <cerrno>
#include <cstdint>
#include <vector>

namespace gpufile::remote {

// One ranged GET: bytes [offset, offset + length) of the object.
struct Part {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// [offset, offset + length) cut into parts of `part_size` bytes (the last one shorter), in
// order. Empty for length 0. part_size 0 is taken as 1.
std::vector<Part> plan_parts(uint64_t offset, uint64_t length, uint64_t part_size);

// What one finished request means for its part.
enum class Verdict {
  done,       // the bytes arrived
  retry,      // worth another try: 5xx but 501 and 505 (503 SlowDown included), 429, a dropped
              // connection, a short body
  not_found,  // 404 (no such object or bucket), 410
  denied,     // 401, 403
  changed,    // 412: the object is no longer the version the read began on (If-Match)
  timed_out,  // the server sent nothing for the stall timeout
  failed,     // anything else: not worth repeating
};

// How the transport ended, in libcurl's terms but without its types.
enum class Transport {
  ok,
  dropped,    // the connection broke or closed early (partial body, reset, nothing received)
  refused,    // could not connect
  timed_out,  // stalled past the timeout
  other,      // anything else (TLS, bad URL, ...)
};

// `status` is the HTTP status (0 when none arrived); `complete` says the body held exactly
// the bytes asked for.
Verdict judge(Transport t, long status, bool complete);

// The errno a final verdict gives the caller: ENOENT, EACCES, ESTALE, ETIMEDOUT, EIO.
int verdict_errno(Verdict v);

// Milliseconds to wait before retry number `retry` (0 for the first): first_ms doubled each
// time, at most max_ms.
uint64_t backoff_ms(unsigned retry, uint64_t first_ms, uint64_t max_ms = 10000);

// "Full jitter": a wait drawn evenly from [0, ceiling_ms], `draw` being a random number. Many
// clients refused at once by one server (503 SlowDown) then spread their retries over the
// backoff rather than all coming back at the same instant.
uint64_t jittered_ms(uint64_t ceiling_ms, uint64_t draw);

// The wait before retry number `retry`: backoff_ms(retry, first_ms), jittered with a draw of
// this thread's random generator.
uint64_t retry_wait_ms(unsigned retry, uint64_t first_ms);

}  // namespace gpufile::remote
