// gpufile::IoBatch over the runtime's Batch (src/exec/batch.hpp), the engine of cuFileBatchIO*.
#include "gpufile/batch.hpp"

#include <chrono>
#include <ctime>
#include <deque>

#include "core/stats.hpp"
#include "cppapi/access.hpp"
#include "cppapi/raise.hpp"
#include "exec/batch.hpp"

namespace gpufile {

namespace {


void* cookie_of(std::uint64_t tag) { return reinterpret_cast<void*>(static_cast<uintptr_t>(tag)); }

BatchCompletion completion_of(const BatchEvent& ev) {
  BatchCompletion c;
  c.tag = reinterpret_cast<uintptr_t>(ev.cookie);
  switch (ev.status) {
    case BatchEvent::Status::complete: c.status = BatchStatus::complete; break;
    case BatchEvent::Status::failed: c.status = BatchStatus::failed; break;
    case BatchEvent::Status::canceled: c.status = BatchStatus::canceled; break;
  }
  if (ev.result.ok()) c.bytes = ev.result.bytes;
  else c.error = cppapi::code_of(ev.result.error);
  return c;
}

timespec timespec_of(std::chrono::nanoseconds d) {
  if (d.count() < 0) d = std::chrono::nanoseconds(0);
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(d);
  return {static_cast<time_t>(s.count()), static_cast<long>((d - s).count())};
}

}  // namespace

struct IoBatch::Impl {
  explicit Impl(unsigned capacity) : batch(capacity) {}
  Batch batch;
  // Ops of size 0: the runtime starts nothing for them (as cuFile reports no event), so their
  // completions wait here for the next wait().
  std::deque<BatchCompletion> finished_empty;
};

IoBatch::IoBatch(unsigned capacity) {
  Error e = Runtime::instance().ensure_open();
  if (e.ok() && (capacity == 0 || capacity > Runtime::instance().settings().io_batchsize))
    e = Error::of(Errc::invalid_argument);
  stats::record_batch_setup(e.ok());
  if (e) cppapi::raise(e, "IoBatch(" + std::to_string(capacity) + ")");
  impl_ = std::make_unique<Impl>(capacity);
}

IoBatch::~IoBatch() {
  if (impl_) stats::record_batch_destroy(true);
}  // ~Batch cancels what has not started and waits for the rest

IoBatch::IoBatch(IoBatch&& other) noexcept = default;
IoBatch& IoBatch::operator=(IoBatch&& other) noexcept = default;

unsigned IoBatch::capacity() const noexcept { return impl_ ? impl_->batch.capacity() : 0; }

namespace {

[[noreturn]] void raise_for_op(const Error& e, size_t index, const std::string& path) {
  cppapi::raise(e, "IoBatch::submit, op " + std::to_string(index), path);
}

// Every op validated into a runtime entry (one of size 0 without an Io: the runtime starts
// nothing for it), or the first bad op's error thrown.
std::vector<Batch::Entry> entries_of(std::span<const BatchOp> ops, uint64_t* read_bytes,
                                     uint64_t* write_bytes) {
  Runtime::SeenFiles seen;
  std::vector<Batch::Entry> entries;
  entries.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const BatchOp& op = ops[i];
    if (op.file == nullptr) raise_for_op(Error::of(Errc::invalid_argument), i, "(no File)");
    const sys::IoKind kind = op.op == IoOp::read ? sys::IoKind::read : sys::IoKind::write;
    if (Error e = cppapi::access_error(*op.file, kind)) raise_for_op(e, i, op.file->path());
    if (op.buf_offset > static_cast<std::size_t>(INT64_MAX))
      raise_for_op(Error::of(Errc::invalid_argument), i, op.file->path());
    Batch::Entry entry;
    entry.cookie = cookie_of(op.tag);
    if (Error e = Runtime::instance().prepare(kind, op.file->handle(), op.buf, op.size,
                                              op.file_offset,
                                              static_cast<int64_t>(op.buf_offset), &entry.io,
                                              nullptr, &seen))
      raise_for_op(e, i, op.file->path());
    if (op.size == 0) entry.io.reset();
    (kind == sys::IoKind::read ? *read_bytes : *write_bytes) += op.size;
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace

void IoBatch::submit(std::span<const BatchOp> ops) {
  if (!impl_) cppapi::raise(errc::invalid_argument, "IoBatch::submit: a moved-from IoBatch");
  const uint64_t t0 = stats::call_started();
  uint64_t read_bytes = 0, write_bytes = 0;
  auto record = [&](bool ok) {
    stats::record_batch_submit(ok, ops.size(), read_bytes, write_bytes, stats::since(t0));
  };
  std::vector<Batch::Entry> entries;
  try {
    entries = entries_of(ops, &read_bytes, &write_bytes);
  } catch (...) {
    record(false);
    throw;
  }
  std::vector<BatchCompletion> empty;
  for (const Batch::Entry& entry : entries)
    if (!entry.io) empty.push_back({reinterpret_cast<uintptr_t>(entry.cookie)});
  Error e = impl_->batch.submit(entries);
  record(e.ok());
  if (e) cppapi::raise(e, "IoBatch::submit");
  impl_->finished_empty.insert(impl_->finished_empty.end(), empty.begin(), empty.end());
}

std::vector<BatchCompletion> IoBatch::wait(unsigned min_completions,
                                           std::optional<std::chrono::nanoseconds> timeout) {
  if (!impl_) cppapi::raise(errc::invalid_argument, "IoBatch::wait: a moved-from IoBatch");
  std::vector<BatchCompletion> out(impl_->finished_empty.begin(), impl_->finished_empty.end());
  impl_->finished_empty.clear();
  const unsigned have = static_cast<unsigned>(out.size());
  const unsigned want = min_completions > have ? min_completions - have : 0;
  std::vector<BatchEvent> events(impl_->batch.capacity());
  timespec limit{};
  if (timeout) limit = timespec_of(*timeout);
  const unsigned n = impl_->batch.reap(want, impl_->batch.capacity(), events.data(),
                                       timeout ? &limit : nullptr);
  for (unsigned i = 0; i < n; ++i) out.push_back(completion_of(events[i]));
  return out;
}

void IoBatch::cancel() {
  if (!impl_) return;
  impl_->batch.cancel();
  stats::record_batch_cancel(true);
}

}  // namespace gpufile
