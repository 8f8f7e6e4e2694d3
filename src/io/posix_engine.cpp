// The posix engine: each op runs to completion inside queue() with pread/pwrite. It is the
// fallback where io_uring is disabled (sysctl kernel.io_uring_disabled, seccomp) and the
// reference the io_uring engine is tested against.
#include <vector>

#include "io/engine.hpp"

namespace gpufile::io {
namespace {

class PosixEngine final : public Engine {
 public:
  explicit PosixEngine(unsigned depth) { done_.reserve(depth); }

  const char* name() const override { return "posix"; }
  bool register_buffers(const iovec*, unsigned) override { return false; }

  bool queue(const Op& op) override {
    ssize_t r = op.kind == sys::IoKind::read ? sys::os().pread(op.fd, op.buf, op.len, op.off)
                                             : sys::os().pwrite(op.fd, op.buf, op.len, op.off);
    done_.push_back({op.tag, static_cast<int>(r)});
    return true;
  }

  int submit() override { return 0; }

  unsigned reap(Completion* out, unsigned max, bool) override {
    unsigned n = 0;
    while (n < max && head_ < done_.size()) out[n++] = done_[head_++];
    if (head_ == done_.size()) done_.clear(), head_ = 0;
    return n;
  }

  unsigned in_flight() const override { return static_cast<unsigned>(done_.size() - head_); }

 private:
  std::vector<Completion> done_;
  size_t head_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_posix_engine(unsigned depth) {
  return std::make_unique<PosixEngine>(depth);
}

std::unique_ptr<Engine> make_engine(EnginePolicy policy, unsigned depth, std::string* why) {
  if (policy == EnginePolicy::posix) {
    *why = "posix engine chosen by configuration";
    return make_posix_engine(depth);
  }
  if (auto e = make_uring_engine(depth, why)) return e;
  if (policy == EnginePolicy::io_uring) return nullptr;
  return make_posix_engine(depth);
}

}  // namespace gpufile::io
