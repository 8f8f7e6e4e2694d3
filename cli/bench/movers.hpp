// Movers: one IO of one lane, the way its transfer type does it (every type but the batch
// ones, which keep many lanes' IOs in flight from one thread: batch.hpp).
#pragma once

#include <sys/types.h>

#include <memory>

#include "cli/bench/device.hpp"
#include "cli/bench/lanes.hpp"
#include "cli/bench/options.hpp"

namespace gpufile::cli::benchmark {

class Mover {
 public:
  virtual ~Mover() = default;
  virtual bool start(const Gpu& gpu, const Options& o, Lane* lane) = 0;
  // Bytes moved, or < 0 on failure (errno may say more).
  virtual ssize_t read(const Block& b) = 0;
  virtual ssize_t write(const Block& b) = 0;
  virtual const Buffer& data() const = 0;  // where an IO's bytes are, for -V
  // Waits for work an IO left running (a copy queued on a stream): before -V looks at data()
  // and when a lane ends, so the run's time includes it.
  virtual bool settle() { return true; }
  virtual void stop(const Options&) {}
};

// The mover of a thread-per-lane transfer type; null for the batch types.
std::unique_ptr<Mover> make_mover(const Options& o);

}  // namespace gpufile::cli::benchmark
