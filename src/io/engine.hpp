// IO engines: how a worker's kernel reads and writes are issued. Two implementations:
// io_uring (src/io/uring_engine.cpp), the default, and posix (src/io/posix_engine.cpp), the
// fallback and reference, which completes each op inside queue().
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/settings.hpp"
#include "sys/os.hpp"

namespace gpufile::io {

struct Op {
  sys::IoKind kind = sys::IoKind::read;
  int fd = -1;
  void* buf = nullptr;
  uint32_t len = 0;
  uint64_t off = 0;
  int buf_index = -1;  // index of a registered buffer containing buf, or -1
  uint64_t tag = 0;    // handed back in the completion
};

struct Completion {
  uint64_t tag;
  int res;  // bytes moved, or -errno
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const char* name() const = 0;
  // Best effort: lets the kernel skip pinning pages of staging memory on every IO.
  // Returns true when the buffers are registered (Op::buf_index may then be used).
  virtual bool register_buffers(const iovec* iov, unsigned n) = 0;
  // Queues one op. False when no slot is free: reap completions first.
  virtual bool queue(const Op& op) = 0;
  // Hands queued ops to the kernel. Returns 0 or -errno.
  virtual int submit() = 0;
  // Moves up to `max` completions into `out`. With `wait`, blocks until at least one is there
  // (if any op is in flight).
  virtual unsigned reap(Completion* out, unsigned max, bool wait) = 0;
  virtual unsigned in_flight() const = 0;
};

std::unique_ptr<Engine> make_posix_engine(unsigned depth);
// nullptr and `why` set when io_uring cannot be used here.
std::unique_ptr<Engine> make_uring_engine(unsigned depth, std::string* why);

// The engine `policy` asks for. With EnginePolicy::automatic, io_uring when it works, else
// posix with `why` saying what stopped io_uring. nullptr only when io_uring was demanded and
// is unavailable.
std::unique_ptr<Engine> make_engine(EnginePolicy policy, unsigned depth, std::string* why);

}  // namespace gpufile::io
