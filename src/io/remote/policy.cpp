#include "io/remote/policy.hpp"

#include <algorithm>
#include <random>

namespace gpufile::remote {

std::vector<Part> plan_parts(uint64_t offset, uint64_t length, uint64_t part_size) {
  part_size = std::max<uint64_t>(part_size, 1);
  std::vector<Part> parts;
  parts.reserve(length / part_size + 1);
  for (uint64_t done = 0; done < length; done += part_size)
    parts.push_back({offset + done, std::min(part_size, length - done)});
  return parts;
}

Verdict judge(Transport t, long status, bool complete) {
  switch (t) {
    case Transport::ok:
      break;
    case Transport::dropped:
    case Transport::refused:
      return Verdict::retry;
    case Transport::timed_out:
      return Verdict::timed_out;
    case Transport::other:
      return Verdict::failed;
  }
  if (status == 200 || status == 206) return complete ? Verdict::done : Verdict::retry;
  if (status == 404 || status == 410) return Verdict::not_found;
  if (status == 401 || status == 403) return Verdict::denied;
  if (status == 412) return Verdict::changed;
  // 501 (the method is not implemented) and 505 (nor the HTTP version) would come again.
  const bool lasting = status == 501 || status == 505;
  if (status == 429 || status == 408 || (status >= 500 && status <= 599 && !lasting))
    return Verdict::retry;
  return Verdict::failed;
}

int verdict_errno(Verdict v) {
  switch (v) {
    case Verdict::done:
      return 0;
    case Verdict::not_found:
      return ENOENT;
    case Verdict::denied:
      return EACCES;
    case Verdict::changed:
      return ESTALE;
    case Verdict::timed_out:
      return ETIMEDOUT;
    case Verdict::retry:
    case Verdict::failed:
      return EIO;
  }
  return EIO;
}

uint64_t backoff_ms(unsigned retry, uint64_t first_ms, uint64_t max_ms) {
  uint64_t wait = first_ms;
  for (unsigned i = 0; i < retry && wait < max_ms; ++i) wait *= 2;
  return std::min(wait, max_ms);
}

uint64_t jittered_ms(uint64_t ceiling_ms, uint64_t draw) {
  return ceiling_ms == UINT64_MAX ? draw : draw % (ceiling_ms + 1);
}

uint64_t retry_wait_ms(unsigned retry, uint64_t first_ms) {
  // One generator per thread (no lock), seeded apart, so that processes and threads refused
  // together do not draw the same waits.
  thread_local std::mt19937_64 random{std::random_device{}()};
  return jittered_ms(backoff_ms(retry, first_ms), random());
}

}  // namespace gpufile::remote
