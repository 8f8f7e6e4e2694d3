// The io_uring engine: one ring per worker, staging slabs registered as fixed buffers.
#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "io/engine.hpp"

namespace gpufile::io {
namespace {

class UringEngine final : public Engine {
 public:
  ~UringEngine() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  // Returns 0 or -errno.
  int init(unsigned depth) {
    int r = sys::os().uring_init(depth, &ring_, 0);
    if (r < 0) return r;
    ready_ = true;
    slots_.resize(depth);
    free_.reserve(depth);
    for (unsigned i = 0; i < depth; ++i) free_.push_back(depth - 1 - i);
    return 0;
  }

  const char* name() const override { return "io_uring"; }

  bool register_buffers(const iovec* iov, unsigned n) override {
    return io_uring_register_buffers(&ring_, iov, n) == 0;
  }

  bool queue(const Op& op) override {
    if (free_.empty()) return false;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      if (io_uring_submit(&ring_) < 0 || (sqe = io_uring_get_sqe(&ring_)) == nullptr) return false;
    }
    unsigned slot = free_.back();
    free_.pop_back();
    slots_[slot] = op;
    prep(sqe, op);
    io_uring_sqe_set_data64(sqe, slot);
    ++queued_;
    return true;
  }

  int submit() override {
    if (queued_ == 0) return 0;
    int r;
    do r = io_uring_submit(&ring_);
    while (r == -EINTR);
    if (r < 0) return r;
    queued_ = 0;
    return 0;
  }

  unsigned reap(Completion* out, unsigned max, bool wait) override {
    if (wait && in_flight() > 0 && !io_uring_cq_ready(&ring_)) {
      // Submit whatever is still queued (a failed submit() may have left some) and wait for
      // one completion in the same call, so a wait can never outlive unsubmitted work.
      int r;
      do r = io_uring_submit_and_wait(&ring_, 1);
      while (r == -EINTR);
      if (r >= 0) queued_ = 0;
    }
    unsigned n = 0;
    io_uring_cqe* cqe = nullptr;
    while (n < max) {
      int r = io_uring_peek_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r < 0 || cqe == nullptr) break;
      unsigned slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      const Op& op = slots_[slot];
      out[n++] = {op.tag, sys::os().uring_result(op.kind, op.fd, op.len, cqe->res)};
      io_uring_cqe_seen(&ring_, cqe);
      free_.push_back(slot);
    }
    return n;
  }

  unsigned in_flight() const override {
    return static_cast<unsigned>(slots_.size() - free_.size());
  }

 private:
  static void prep(io_uring_sqe* sqe, const Op& op) {
    const bool fixed = op.buf_index >= 0;
    if (op.kind == sys::IoKind::read) {
      if (fixed) io_uring_prep_read_fixed(sqe, op.fd, op.buf, op.len, op.off, op.buf_index);
      else io_uring_prep_read(sqe, op.fd, op.buf, op.len, op.off);
    } else {
      if (fixed) io_uring_prep_write_fixed(sqe, op.fd, op.buf, op.len, op.off, op.buf_index);
      else io_uring_prep_write(sqe, op.fd, op.buf, op.len, op.off);
    }
  }

  io_uring ring_{};
  bool ready_ = false;
  std::vector<Op> slots_;
  std::vector<unsigned> free_;
  unsigned queued_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_uring_engine(unsigned depth, std::string* why) {
  auto e = std::make_unique<UringEngine>();
  int r = e->init(depth);
  if (r == 0) return e;
  switch (-r) {
    case EPERM:
      *why = "io_uring is not permitted here (sysctl kernel.io_uring_disabled, or a seccomp "
             "profile); using the posix engine";
      break;
    case ENOSYS:
      *why = "this kernel has no io_uring (or a seccomp filter hides it); using the posix engine";
      break;
    default:
      *why = std::string("io_uring set-up failed (") + std::strerror(-r) + "); using the posix engine";
  }
  return nullptr;
}

}  // namespace gpufile::io
