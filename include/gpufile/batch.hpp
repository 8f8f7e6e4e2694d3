// Batch IO (cuFileBatchIO*): many reads and writes submitted at once, on any files, completing
// in any order, collected with wait(). Like KvikIO's BatchHandle.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "gpufile/export.hpp"
#include "gpufile/file.hpp"

namespace gpufile {

enum class IoOp { read, write };

// One IO of a batch: as File::read / File::write, plus a tag that comes back with its result.
struct BatchOp {
  IoOp op = IoOp::read;
  const File* file = nullptr;  // must stay open until the op completed
  void* buf = nullptr;         // read into, or write from, buf + buf_offset
  std::size_t size = 0;
  std::int64_t file_offset = 0;
  std::size_t buf_offset = 0;
  std::uint64_t tag = 0;
};

enum class BatchStatus { complete, failed, canceled };

struct BatchCompletion {
  std::uint64_t tag = 0;
  BatchStatus status = BatchStatus::complete;
  std::size_t bytes = 0;   // moved; fewer than asked only for a read at end of file
  std::error_code error;   // why it failed or was canceled (errc::canceled); empty when complete
  bool ok() const noexcept { return status == BatchStatus::complete; }
};

class GPUFILE_API IoBatch {
 public:
  // At most `capacity` ops submitted and not yet collected by wait(); 1 to the setting
  // properties.io_batchsize (128 by default). Opens the driver if needed.
  explicit IoBatch(unsigned capacity);
  // Cancels the ops that have not started and waits for the rest.
  ~IoBatch();
  IoBatch(IoBatch&& other) noexcept;
  IoBatch& operator=(IoBatch&& other) noexcept;
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  unsigned capacity() const noexcept;
  // Checks every op, then starts them all; a bad op throws and none starts. errc::batch_full
  // when they would not fit the capacity together with the ops not yet collected. An op of size
  // 0 completes at once with 0 bytes.
  void submit(std::span<const BatchOp> ops);
  // Waits until at least `min_completions` ops completed (fewer when fewer are outstanding) or
  // `timeout` passed, then returns every completion ready, in completion order.
  std::vector<BatchCompletion> wait(unsigned min_completions,
                                    std::optional<std::chrono::nanoseconds> timeout = {});
  // Completions ready now, without waiting.
  std::vector<BatchCompletion> poll() { return wait(0); }
  // Cancels the ops that have not started (they complete as canceled) and waits for the rest.
  void cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufile
