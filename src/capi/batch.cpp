// cuFile batch API: many IOs in one submission, completions reaped by polling.
#include <chrono>
#include <vector>

#include "capi/capi.hpp"
#include "core/stats.hpp"
#include "exec/batch.hpp"

using gpufile::Batch;
using gpufile::BatchEvent;
using gpufile::Errc;
using gpufile::Error;
using gpufile::Runtime;
using gpufile::capi::guarded;
namespace batches = gpufile::batches;
namespace stats = gpufile::stats;

namespace {

Error setup(CUfileBatchHandle_t* batch_idp, unsigned nr) {
  if (batch_idp == nullptr) return Error::of(Errc::invalid_argument);
  if (Error e = Runtime::instance().ensure_open()) return e;
  if (nr == 0 || nr > Runtime::instance().settings().io_batchsize)
    return Error::of(Errc::invalid_argument);
  return batches::create(nr, batch_idp);
}

// Validates every entry before starting any, so a bad entry leaves the batch as it was.
Error build_entries(const CUfileIOParams_t* params, unsigned nr, std::vector<Batch::Entry>* out,
                    uint64_t* read_bytes, uint64_t* write_bytes) {
  Runtime::SeenFiles seen;
  out->reserve(nr);
  for (unsigned i = 0; i < nr; ++i) {
    const CUfileIOParams_t& p = params[i];
    if (p.mode != CUFILE_BATCH || (p.opcode != CUFILE_READ && p.opcode != CUFILE_WRITE))
      return Error::of(Errc::invalid_argument);
    auto kind = p.opcode == CUFILE_READ ? gpufile::sys::IoKind::read : gpufile::sys::IoKind::write;
    const auto& b = p.u.batch;
    Batch::Entry entry;
    entry.cookie = p.cookie;
    if (Error e = Runtime::instance().prepare(kind, p.fh, b.devPtr_base, b.size, b.file_offset,
                                              b.devPtr_offset, &entry.io, nullptr, &seen)) {
      GPUFILE_LOG(gpufile::LogLevel::error, "batch entry %u refused: %s", i,
                  gpufile::describe(e).c_str());
      return e;
    }
    if (b.size == 0) entry.io.reset();  // cuFile reports no event for an empty entry
    (kind == gpufile::sys::IoKind::read ? *read_bytes : *write_bytes) += b.size;
    out->push_back(std::move(entry));
  }
  return Error::none();
}

Error submit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t* iocbp) {
  const uint64_t t0 = stats::call_started();
  auto batch = batches::find(batch_idp);
  if (!batch) return Error::of(Errc::invalid_argument);
  // NVIDIA's library answers an empty, oversized or unusable submission with
  // CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR (tests/conformance, section batch).
  const Error refused = Error::of(Errc::batch_refused);
  if (iocbp == nullptr || nr == 0 || nr > batch->capacity()) return refused;
  std::vector<Batch::Entry> entries;
  uint64_t rd = 0, wr = 0;
  Error e = build_entries(iocbp, nr, &entries, &rd, &wr);
  if (e.ok()) e = batch->submit(entries);
  stats::record_batch_submit(e.ok(), nr, rd, wr, stats::since(t0));
  if (e && e.code != Errc::batch_full) return refused;
  return e;
}

CUfileStatus_t status_of(BatchEvent::Status s) {
  switch (s) {
    case BatchEvent::Status::complete: return CUFILE_COMPLETE;
    case BatchEvent::Status::canceled: return CUFILE_CANCELED;
    case BatchEvent::Status::failed: break;
  }
  return CUFILE_FAILED;
}

Error get_status(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned* nr,
                 CUfileIOEvents_t* iocbp, struct timespec* timeout) {
  auto batch = batches::find(batch_idp);
  if (!batch || nr == nullptr || (iocbp == nullptr && *nr > 0) || min_nr > *nr)
    return Error::of(Errc::invalid_argument);
  std::vector<BatchEvent> events(*nr);
  unsigned n = batch->reap(min_nr, *nr, events.data(), timeout);
  for (unsigned i = 0; i < n; ++i) {
    const BatchEvent& ev = events[i];
    iocbp[i].cookie = ev.cookie;
    iocbp[i].status = status_of(ev.status);
    iocbp[i].ret = ev.result.ok() ? ev.result.bytes
                                  : static_cast<size_t>(gpufile::capi::negative_code(ev.result.error));
  }
  *nr = n;
  return Error::none();
}

}  // namespace

extern "C" {

CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t* batch_idp, unsigned nr) {
  return guarded(__func__, [&] {
    Error e = setup(batch_idp, nr);
    stats::record_batch_setup(e.ok());
    return e;
  });
}

CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
                                  CUfileIOParams_t* iocbp, unsigned /*flags*/) {
  return guarded(__func__, [&] { return submit(batch_idp, nr, iocbp); });
}

CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned* nr,
                                     CUfileIOEvents_t* iocbp, struct timespec* timeout) {
  return guarded(__func__, [&] { return get_status(batch_idp, min_nr, nr, iocbp, timeout); });
}

CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp) {
  return guarded(__func__, [&] {
    auto batch = batches::find(batch_idp);
    if (!batch) return Error::of(Errc::invalid_argument);
    batch->cancel();
    stats::record_batch_cancel(true);
    return Error::none();
  });
}

void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp) {
  guarded(__func__, [&] {
    bool ok = batches::destroy(batch_idp);
    stats::record_batch_destroy(ok);
    return Error::none();
  });
}

}  // extern "C"
