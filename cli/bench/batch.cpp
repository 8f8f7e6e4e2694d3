#include "cli/bench/batch.hpp"

#include <cufile.h>

#include <cstdio>

namespace gpufile::cli::benchmark {
namespace {

struct BatchRound {
  std::vector<CUfileIOParams_t> params;
  std::vector<Block> blocks;  // by lane
  Clock::time_point submitted;
};

// Takes the next block of every lane that still has one; false when none has.
bool fill_round(RunState& run, std::vector<Lane>& lanes, const Buffer& buf,
                std::vector<char>* scratch, BatchRound* round) {
  round->params.clear();
  const bool writing = is_write(run.type);
  for (size_t j = 0; j < lanes.size(); ++j) {
    if (!run.timed() && lanes[j].pass_done()) continue;
    bool wrapped = false;
    Block b = lanes[j].next(&wrapped);
    round->blocks[j] = b;
    const uint64_t slot = j * run.opt.io_size;
    if (writing && run.opt.verify && !stage_block(run, buf, slot, lanes[j], b, scratch))
      return false;
    CUfileIOParams_t p{};
    p.mode = CUFILE_BATCH;
    p.u.batch = {buf.ptr(), static_cast<off_t>(b.offset), static_cast<off_t>(slot), b.length};
    p.fh = lanes[j].handle;
    p.opcode = writing ? CUFILE_WRITE : CUFILE_READ;
    p.cookie = reinterpret_cast<void*>(j);
    round->params.push_back(p);
  }
  return !round->params.empty();
}

// Reaps the whole round, timing each IO from submission to the moment it was seen complete.
bool reap_round(RunState& run, CUfileBatchHandle_t batch, std::vector<Lane>& lanes,
                const BatchRound& round, LaneStats& stats) {
  std::vector<CUfileIOEvents_t> events(round.params.size());
  size_t reaped = 0;
  while (reaped < round.params.size()) {
    unsigned got = static_cast<unsigned>(events.size());
    CUfileError_t e = cuFileBatchIOGetStatus(batch, 1, &got, events.data(), nullptr);
    if (e.err != CU_FILE_SUCCESS) return run.fail("cuFileBatchIOGetStatus failed"), false;
    auto now = Clock::now();
    for (unsigned k = 0; k < got; ++k) {
      size_t j = reinterpret_cast<size_t>(events[k].cookie);
      ssize_t n = events[k].status == CUFILE_COMPLETE ? static_cast<ssize_t>(events[k].ret) : -1;
      stats.latency_us.push_back(micros(round.submitted, now));
      if (!io_completed(run, lanes[j], round.blocks[j], n)) return false;
      stats.bytes += round.blocks[j].length;
    }
    reaped += got;
  }
  return true;
}

bool check_round(RunState& run, std::vector<Lane>& lanes, const Buffer& buf,
                 const BatchRound& round, std::vector<char>* scratch) {
  for (const CUfileIOParams_t& p : round.params) {
    size_t j = reinterpret_cast<size_t>(p.cookie);
    if (!check_read(run, buf, j * run.opt.io_size, lanes[j], round.blocks[j], scratch))
      return false;
  }
  return true;
}

void drive_batches(RunState& run, CUfileBatchHandle_t batch, std::vector<Lane>& lanes,
                   const Buffer& buf, LaneStats& stats) {
  BatchRound round;
  round.blocks.resize(lanes.size());
  std::vector<char> scratch(run.opt.verify ? run.opt.io_size : 0);
  const bool check = run.opt.verify && !is_write(run.type);
  while (!run.should_stop() && fill_round(run, lanes, buf, &scratch, &round)) {
    round.submitted = Clock::now();
    CUfileError_t e = cuFileBatchIOSubmit(batch, static_cast<unsigned>(round.params.size()),
                                          round.params.data(), 0);
    if (e.err != CU_FILE_SUCCESS)
      return run.fail(std::string("cuFileBatchIOSubmit: ") + CUFILE_ERRSTR(e.err));
    if (!reap_round(run, batch, lanes, round, stats)) return;
    if (check && !check_round(run, lanes, buf, round, &scratch)) return;
  }
}

}  // namespace

bool run_batch(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes, LaneStats* stats) {
  Buffer buf;
  if (!buf.allocate(Mem::device, gpu, run.opt.io_size * lanes.size()) ||
      !fill_noise(buf, run.opt.seed) || !register_buffer(buf, run.opt))
    return std::fprintf(stderr, "gpufile bench: could not set up the batch buffer\n"), false;
  CUfileBatchHandle_t batch = nullptr;
  CUfileError_t e = cuFileBatchIOSetUp(&batch, static_cast<unsigned>(lanes.size()));
  if (e.err != CU_FILE_SUCCESS) {
    std::fprintf(stderr, "gpufile bench: cuFileBatchIOSetUp: %s\n", CUFILE_ERRSTR(e.err));
  } else {
    drive_batches(run, batch, lanes, buf, *stats);
    if (run.failed()) cuFileBatchIOCancel(batch);
    cuFileBatchIODestroy(batch);
  }
  deregister_buffer(buf, run.opt);
  return e.err == CU_FILE_SUCCESS;
}

}  // namespace gpufile::cli::benchmark
