// Batches: many IOs submitted at once, completed out of order, reaped by polling — the engine
// behind cuFileBatchIO*. Entries go through the same executor as every other IO.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "exec/runtime.hpp"

namespace gpufile {

struct BatchEvent {
  enum class Status { complete, failed, canceled };
  void* cookie = nullptr;
  Status status = Status::complete;
  IoResult result;
};

class Batch {
 public:
  explicit Batch(unsigned capacity) : capacity_(capacity) {}
  // Cancels what is still queued and waits for the rest.
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  unsigned capacity() const { return capacity_; }

  struct Entry {
    std::unique_ptr<Io> io;  // nullptr for a zero-length entry: it completes without an event
    void* cookie = nullptr;
  };
  // Starts every entry. batch_full when they would exceed the capacity together with the
  // entries not yet reaped.
  Error submit(std::vector<Entry>& entries);
  // Waits until at least min_nr events are ready (or the timeout passes; nullptr waits for
  // ever), then moves up to `max` of them into `out`. Returns how many it moved.
  unsigned reap(unsigned min_nr, unsigned max, BatchEvent* out, const timespec* timeout);
  // Marks every entry canceled; chunks not yet started are skipped. Waits for the rest.
  void cancel();

 private:
  void on_done(Io* io, void* cookie);

  const unsigned capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Io*> running_;
  std::deque<BatchEvent> ready_;
  // Threads waiting in reap(), and the fewest ready events one of them waits for (a completion
  // wakes them only once that many are ready: a reaper waiting for a whole batch is woken once,
  // not once per entry).
  unsigned waiters_ = 0;
  size_t fewest_wanted_ = SIZE_MAX;
};

// Batches by opaque token, as handed out to C callers.
namespace batches {
Error create(unsigned capacity, void** token);
std::shared_ptr<Batch> find(void* token);
// Removes the batch; it is destroyed once the last caller using it lets go.
bool destroy(void* token);
}  // namespace batches

}  // namespace gpufile
