// The batch transfer types: one thread keeps -w IOs in flight, one IO per lane, each lane with
// its own slot of a shared GPU buffer.
//   -x 6 GPU_BATCH         cuFileBatchIOSubmit of the round, then cuFileBatchIOGetStatus
//                          until every IO is reaped.
//   -x 7 GPU_BATCH_STREAM  cuFileReadAsync/WriteAsync of every IO of the round queued on one
//                          CUDA stream, then one cuStreamSynchronize. cuFile 1.15 has no
//                          stream-ordered batch submission (cuFileBatchIOSubmit takes no
//                          stream), so "batch in stream order" is the stream API used for a
//                          whole batch: the host submits without waiting, the IOs run one
//                          after another in stream order.
#pragma once

#include <functional>
#include <vector>

#include "cli/bench/run.hpp"

namespace gpufile::cli::benchmark {

// Runs the lanes as batch slots until the pass is done, the time is up or an IO failed (the
// failure is in `run`). The clock starts (`start`) once the buffer and the batch are set up
// and ends with the last round's reaping; when `start` declines, no IO runs. False when the
// batch could not be set up.
bool run_batch(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes, LaneStats* stats,
               const std::function<bool()>& start);

}  // namespace gpufile::cli::benchmark
