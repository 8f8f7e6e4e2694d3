#include "sys/faulty_os.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace gpufile::sys {
namespace {

constexpr size_t kJournalMax = 200;  // lines kept; a persistent rule can fire thousands of times

const char* op_name(FaultOp op) {
  static const char* names[] = {"open",       "pread",       "pwrite",    "fstat",
                                "uring_init", "uring_read",  "uring_write", "cachestat",
                                "dio_align",  "any_read",    "any_write", "pread_cached",
                                "map_file",   "fill_cache"};
  return names[static_cast<int>(op)];
}

bool covers(FaultOp rule_op, FaultOp op) {
  if (rule_op == op) return true;
  // A read from the page cache only is a pread to every rule that does not single it out.
  if (rule_op == FaultOp::pread) return op == FaultOp::pread_cached;
  if (rule_op == FaultOp::any_read)
    return op == FaultOp::pread || op == FaultOp::pread_cached || op == FaultOp::uring_read;
  if (rule_op == FaultOp::any_write) return op == FaultOp::pwrite || op == FaultOp::uring_write;
  return false;
}

// The file an fd or a /proc/self/fd/N path stands for (the library reopens files that way).
std::string link_target(const char* link) {
  char buf[4096];
  ssize_t n = ::readlink(link, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string fd_target(int fd) { return link_target(fd_path(fd).text); }

// Asks the kernel directly, not through the seam: the fault layer must not count itself.
bool is_direct_fd(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_DIRECT) != 0;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

size_t FaultyOs::add(FaultRule rule) {
  std::lock_guard lock(mu_);
  rules_.push_back({std::move(rule), 0, 0});
  return rules_.size() - 1;
}

void FaultyOs::clear() {
  std::lock_guard lock(mu_);
  rules_.clear();
  journal_.clear();
}

uint64_t FaultyOs::fired(size_t id) const {
  std::lock_guard lock(mu_);
  return id < rules_.size() ? rules_[id].fired : 0;
}

uint64_t FaultyOs::seen(size_t id) const {
  std::lock_guard lock(mu_);
  return id < rules_.size() ? rules_[id].seen : 0;
}

uint64_t FaultyOs::fired_total() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const Entry& e : rules_) n += e.fired;
  return n;
}

std::string FaultyOs::journal() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const std::string& line : journal_) out += line + '\n';
  return out;
}

// A uniform number in [0, 1) that depends only on the seed, the rule and the call's number:
// the same calls in the same order fire the same faults, whatever thread makes them.
double FaultyOs::uniform(size_t rule, uint64_t call) const {
  uint64_t x = splitmix64(seed_ ^ splitmix64((rule + 1) * 0x100000001b3ull ^ call));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

bool FaultyOs::matches(const FaultRule& r, FaultOp op, int fd, const char* path,
                       int open_flags) const {
  if (!covers(r.op, op)) return false;
  if (op == FaultOp::open) {
    if (r.direct_only && !(open_flags & O_DIRECT)) return false;
    if (r.path.empty()) return true;
    std::string p = path ? path : "";
    if (p.starts_with("/proc/self/fd/")) p += " " + link_target(path);
    return p.find(r.path) != std::string::npos;
  }
  if (fd < 0) return !r.direct_only && r.path.empty() && r.fd < 0;  // uring_init: no file
  if (r.fd >= 0 && r.fd != fd) return false;
  if (r.direct_only && !is_direct_fd(fd)) return false;
  return r.path.empty() || fd_target(fd).find(r.path) != std::string::npos;
}

FaultyOs::Verdict FaultyOs::decide(FaultOp op, int fd, const char* path, int open_flags,
                                   uint64_t off, uint64_t len) {
  Verdict v;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < rules_.size(); ++i) {
      Entry& e = rules_[i];
      const FaultRule& r = e.rule;
      if (!matches(r, op, fd, path, open_flags)) continue;
      const uint64_t call = ++e.seen;
      if (call < r.nth || e.fired >= r.times) continue;
      if (r.probability < 1.0 && uniform(i, call) >= r.probability) continue;
      ++e.fired;
      switch (r.action) {
        case FaultAction::fail:
          if (v.err == 0) v.err = r.err;
          break;
        case FaultAction::short_io: v.limit = std::min(v.limit, r.limit); break;
        case FaultAction::delay: v.delay_us += r.delay_us; break;
        case FaultAction::corrupt:
          v.corrupt = true;
          v.corrupt_at = splitmix64(seed_ ^ call ^ (i << 32));
          break;
      }
      if (journal_.size() < kJournalMax) {
        static const char* actions[] = {"fail", "short", "delay", "corrupt"};
        char line[200];
        std::snprintf(line, sizeof line, "%s fd %d off %llu len %llu: rule %zu call %llu %s %s",
                      op_name(op), fd, static_cast<unsigned long long>(off),
                      static_cast<unsigned long long>(len), i,
                      static_cast<unsigned long long>(call), actions[static_cast<int>(r.action)],
                      r.action == FaultAction::fail ? std::strerror(r.err) : "");
        journal_.emplace_back(line);
      }
    }
  }
  if (v.delay_us) std::this_thread::sleep_for(std::chrono::microseconds(v.delay_us));
  return v;
}

int FaultyOs::open(const char* path, int flags, mode_t mode) {
  Verdict v = decide(FaultOp::open, -1, path, flags, 0, 0);
  return v.err ? -v.err : Os::open(path, flags, mode);
}

// A short transfer is a real call with a shorter length, except on an O_DIRECT fd, where the
// shorter length could break the alignment O_DIRECT demands (turning a short read into EINVAL):
// there the whole transfer runs and the result is clamped. The caller then moves the "missing"
// bytes again, which rewrites or rereads the same bytes: harmless.
ssize_t FaultyOs::pread(int fd, void* buf, size_t len, uint64_t off) {
  return faulted_read(fd, buf, len, off, false);
}

ssize_t FaultyOs::pread_cached(int fd, void* buf, size_t len, uint64_t off) {
  return faulted_read(fd, buf, len, off, true);
}

ssize_t FaultyOs::faulted_read(int fd, void* buf, size_t len, uint64_t off, bool cached_only) {
  const FaultOp op = cached_only ? FaultOp::pread_cached : FaultOp::pread;
  Verdict v = decide(op, fd, nullptr, 0, off, len);
  if (v.err) return -v.err;
  const bool clamp = v.limit < len && is_direct_fd(fd);
  const size_t n = clamp ? len : static_cast<size_t>(std::min<uint64_t>(len, v.limit));
  ssize_t r = cached_only ? Os::pread_cached(fd, buf, n, off) : Os::pread(fd, buf, n, off);
  if (clamp && r > static_cast<ssize_t>(v.limit)) r = static_cast<ssize_t>(v.limit);
  if (v.corrupt && r > 0) static_cast<unsigned char*>(buf)[v.corrupt_at % r] ^= 0xff;
  return r;
}

ssize_t FaultyOs::pwrite(int fd, const void* buf, size_t len, uint64_t off) {
  Verdict v = decide(FaultOp::pwrite, fd, nullptr, 0, off, len);
  if (v.err) return -v.err;
  const bool clamp = v.limit < len && is_direct_fd(fd);
  const size_t n = clamp ? len : static_cast<size_t>(std::min<uint64_t>(len, v.limit));
  ssize_t r = Os::pwrite(fd, buf, n, off);
  if (clamp && r > static_cast<ssize_t>(v.limit)) r = static_cast<ssize_t>(v.limit);
  return r;
}

int FaultyOs::fstat(int fd, struct stat* st) {
  Verdict v = decide(FaultOp::fstat, fd, nullptr, 0, 0, 0);
  return v.err ? -v.err : Os::fstat(fd, st);
}

int FaultyOs::dio_align(int fd, DioAlign* out) {
  Verdict v = decide(FaultOp::dio_align, fd, nullptr, 0, 0, 0);
  return v.err ? -v.err : Os::dio_align(fd, out);
}

int FaultyOs::cachestat(int fd, uint64_t off, uint64_t len, Residency* out) {
  Verdict v = decide(FaultOp::cachestat, fd, nullptr, 0, off, len);
  return v.err ? -v.err : Os::cachestat(fd, off, len, out);
}

int FaultyOs::map_file(int fd, uint64_t off, size_t len, void** out) {
  Verdict v = decide(FaultOp::map_file, fd, nullptr, 0, off, len);
  return v.err ? -v.err : Os::map_file(fd, off, len, out);
}

int FaultyOs::fill_cache(int fd, uint64_t off, size_t len) {
  Verdict v = decide(FaultOp::fill_cache, fd, nullptr, 0, off, len);
  return v.err ? -v.err : Os::fill_cache(fd, off, len);
}

// A failing set-up never creates the ring: there is nothing to tear down.
int FaultyOs::uring_init(unsigned entries, io_uring* ring, unsigned flags) {
  Verdict v = decide(FaultOp::uring_init, -1, nullptr, 0, 0, entries);
  return v.err ? -v.err : Os::uring_init(entries, ring, flags);
}

// The kernel already moved `res` bytes; a fault only changes what the engine is told. A failed
// or clamped result makes the engine move the same bytes again, which is harmless.
int FaultyOs::uring_result(IoKind kind, int fd, size_t requested, int res) {
  FaultOp op = kind == IoKind::read ? FaultOp::uring_read : FaultOp::uring_write;
  Verdict v = decide(op, fd, nullptr, 0, 0, requested);
  res = Os::uring_result(kind, fd, requested, res);
  if (v.err) return -v.err;
  if (res > 0 && static_cast<uint64_t>(res) > v.limit) res = static_cast<int>(v.limit);
  return res;
}

}  // namespace gpufile::sys
