#include "exec/batch.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "core/stats.hpp"

namespace gpufile {

Batch::~Batch() { cancel(); }

Error Batch::submit(std::vector<Entry>& entries) {
  std::vector<Io*> started;
  {
    std::lock_guard lock(mu_);
    size_t live = running_.size() + ready_.size();
    if (live + entries.size() > capacity_) return Error::of(Errc::batch_full);
    for (Entry& e : entries) {
      if (!e.io) continue;  // zero length: cuFile reports no event for it either
      Io* io = e.io.release();
      void* cookie = e.cookie;
      io->job.on_complete = [this, io, cookie](exec::Job&) { on_done(io, cookie); };
      running_.push_back(io);
      started.push_back(io);
    }
  }
  Runtime::instance().submit(started.data(), started.size());
  return Error::none();
}

void Batch::on_done(Io* io, void* cookie) {
  IoResult r = io->job.result();
  Runtime::account(*io, r);
  const auto op = io->job.kind == sys::IoKind::read ? stats::Op::read : stats::Op::write;
  stats::record_batch_complete(op, r.bytes, stats::since(io->started()), r.ok());
  BatchEvent ev;
  ev.cookie = cookie;
  ev.result = r;
  ev.status = r.ok() ? BatchEvent::Status::complete
              : r.error.code == Errc::canceled ? BatchEvent::Status::canceled
                                               : BatchEvent::Status::failed;
  // One locked section: once the entry leaves running_, cancel() no longer touches it and a
  // waiting destructor may free *this, so nothing may follow the unlock.
  std::lock_guard lock(mu_);
  running_.erase(std::find(running_.begin(), running_.end(), io));
  // Gives back the handle, buffer and session references now, not at reap time: a batch the
  // caller never reaps must not keep the driver from closing.
  delete io;
  ready_.push_back(ev);
  if (running_.empty() || (waiters_ > 0 && ready_.size() >= fewest_wanted_)) cv_.notify_all();
}

unsigned Batch::reap(unsigned min_nr, unsigned max, BatchEvent* out, const timespec* timeout) {
  std::unique_lock lock(mu_);
  // Waiting for more than can ever arrive would never end.
  unsigned want = std::min<unsigned>(min_nr, static_cast<unsigned>(running_.size() + ready_.size()));
  auto enough = [&] { return ready_.size() >= want; };
  if (!enough()) {
    ++waiters_;
    fewest_wanted_ = std::min<size_t>(fewest_wanted_, want);
    if (timeout == nullptr) {
      cv_.wait(lock, enough);
    } else {
      auto d = std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec);
      cv_.wait_for(lock, d, enough);
    }
    // The last waiter out forgets the wants; one that stays may be woken early, never late.
    if (--waiters_ == 0) fewest_wanted_ = SIZE_MAX;
  }
  unsigned n = 0;
  while (n < max && !ready_.empty()) {
    out[n++] = ready_.front();
    ready_.pop_front();
  }
  return n;
}

void Batch::cancel() {
  std::unique_lock lock(mu_);
  for (Io* io : running_) io->job.cancel();
  cv_.wait(lock, [&] { return running_.empty(); });
}

namespace batches {
namespace {

std::mutex mu;
std::unordered_map<uintptr_t, std::shared_ptr<Batch>>& table() {
  static auto* t = new std::unordered_map<uintptr_t, std::shared_ptr<Batch>>();
  return *t;
}
uintptr_t next_token = 0xba7c0001;

}  // namespace

Error create(unsigned capacity, void** token) {
  std::lock_guard lock(mu);
  uintptr_t t = next_token++;
  table().emplace(t, std::make_shared<Batch>(capacity));
  *token = reinterpret_cast<void*>(t);
  return Error::none();
}

std::shared_ptr<Batch> find(void* token) {
  std::lock_guard lock(mu);
  auto it = table().find(reinterpret_cast<uintptr_t>(token));
  return it == table().end() ? nullptr : it->second;
}

bool destroy(void* token) {
  std::shared_ptr<Batch> b;
  {
    std::lock_guard lock(mu);
    auto it = table().find(reinterpret_cast<uintptr_t>(token));
    if (it == table().end()) return false;
    b = std::move(it->second);
    table().erase(it);
  }
  b.reset();  // cancels and waits here, outside the table lock, if this was the last user
  return true;
}

}  // namespace batches
}  // namespace gpufile
