// Rows of a file gathered into memory: a part of a tensor stored in C order that is many short
// runs in the file (a rank's columns of a weight split along its last dimension), read run by
// run out of the page cache and packed row after row into the destination.
//
// Why not read the rows' whole span and place the runs on the GPU (python/gpufile/_scatter.py)?
// A span read moves every byte of the span through host memory and over the link, a rank's
// part and its neighbours'; with N ranks each one stages N times its part, through host memory
// that several GPUs' links already outrun (docs/performance.md, "The host model"). Gathered,
// a rank's part crosses host memory as a whole read does: out of the page cache, into pinned
// staging, over the link, and no other bytes do. The price is one kernel read per run, which
// only cached bytes make cheap: a run missing from the cache would wait for the disk alone
// (gpufile's own descriptor has readahead off), so callers gather only spans the page cache
// holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/caller.hpp"
#include "exec/job.hpp"

namespace gpufile::exec {

// Where the rows are: `counts[k]` rows along outer dimension k (outermost first), `strides[k]`
// file bytes apart; row (i0, i1, ...) is `run` bytes at first + sum(i_k * strides[k]). No
// dimension: one row.
struct FileRows {
  uint64_t first = 0;
  uint64_t run = 0;
  std::vector<uint64_t> counts;
  std::vector<uint64_t> strides;

  uint64_t rows() const;
  uint64_t bytes() const { return rows() * run; }
  // File offset of the row numbered `index` in C order (0 <= index < rows()).
  uint64_t row_offset(uint64_t index) const;
  // File offset one past the last row's last byte.
  uint64_t span_end() const;
  // What is wrong with the rows, in a sentence (empty when nothing is): counts and strides of
  // different lengths, an empty run, a zero count, or rows that would reach past 2^63 (the
  // largest file offset).
  std::string problem() const;
  // invalid_argument where problem() says something.
  Error check() const { return problem().empty() ? Error::none() : Error::of(Errc::invalid_argument); }
};

// Reads `rows` into the job's memory (job.addr, host or GPU; job.len == rows.bytes()), row
// after row, with buffered reads of job.file on the calling thread. GPU memory is reached
// through two of `staging`'s pinned buffers in turn (each one's copy to the GPU runs while the
// other fills), or a buffer pinned for the call when the pool has none free. Returns the bytes
// that landed, contiguous from the start: fewer only where the file ends before the last row.
// Every copy into the destination has ended when it returns, also after a failure.
IoResult gather_rows(const Job& job, const FileRows& rows, StagingPool& staging);

}  // namespace gpufile::exec
