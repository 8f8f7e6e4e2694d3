#include "cli/bench/batch.hpp"

#include <cufile.h>

#include <cstdio>
#include <memory>

namespace gpufile::cli::benchmark {
namespace {

// One round: the next block of every lane that still has one.
struct BatchRound {
  std::vector<size_t> lanes;  // the lanes with an IO in this round
  std::vector<Block> blocks;  // by lane
  Clock::time_point submitted;
};

// How a round's IOs are submitted and reaped; -x 6 and -x 7 differ only here.
class Batcher {
 public:
  Batcher(const Buffer& buf, uint64_t slot_bytes) : buf_(buf), slot_bytes_(slot_bytes) {}
  virtual ~Batcher() = default;
  virtual bool open(const Gpu& gpu, size_t slots) = 0;
  virtual bool submit(RunState& run, std::vector<Lane>& lanes, const BatchRound& round) = 0;
  // Records each IO's latency and bytes; false (the reason in `run`) when one failed.
  virtual bool reap(RunState& run, std::vector<Lane>& lanes, const BatchRound& round,
                    LaneStats& stats) = 0;
  virtual void close(RunState& run) = 0;

 protected:
  off_t slot(size_t lane) const { return static_cast<off_t>(lane * slot_bytes_); }
  const Buffer& buf_;
  const uint64_t slot_bytes_;
};

// -x 6: the cuFile batch API.
class CuFileBatcher : public Batcher {
 public:
  using Batcher::Batcher;
  bool open(const Gpu&, size_t slots) override {
    CUfileError_t e = cuFileBatchIOSetUp(&batch_, static_cast<unsigned>(slots));
    if (e.err == CU_FILE_SUCCESS) return true;
    std::fprintf(stderr, "gpufile bench: cuFileBatchIOSetUp: %s\n", CUFILE_ERRSTR(e.err));
    batch_ = nullptr;
    return false;
  }
  bool submit(RunState& run, std::vector<Lane>& lanes, const BatchRound& round) override {
    params_.clear();
    for (size_t j : round.lanes) {
      const Block& b = round.blocks[j];
      CUfileIOParams_t p{};
      p.mode = CUFILE_BATCH;
      p.u.batch = {buf_.ptr(), static_cast<off_t>(b.offset), slot(j), b.length};
      p.fh = lanes[j].handle;
      p.opcode = is_write(run.type) ? CUFILE_WRITE : CUFILE_READ;
      p.cookie = reinterpret_cast<void*>(j);
      params_.push_back(p);
    }
    CUfileError_t e =
        cuFileBatchIOSubmit(batch_, static_cast<unsigned>(params_.size()), params_.data(), 0);
    if (e.err == CU_FILE_SUCCESS) return true;
    run.fail(std::string("cuFileBatchIOSubmit: ") + CUFILE_ERRSTR(e.err));
    return false;
  }
  // Each IO is timed from submission to the moment it was seen complete.
  bool reap(RunState& run, std::vector<Lane>& lanes, const BatchRound& round,
            LaneStats& stats) override {
    std::vector<CUfileIOEvents_t> events(round.lanes.size());
    size_t reaped = 0;
    while (reaped < round.lanes.size()) {
      unsigned got = static_cast<unsigned>(events.size());
      CUfileError_t e = cuFileBatchIOGetStatus(batch_, 1, &got, events.data(), nullptr);
      if (e.err != CU_FILE_SUCCESS) return run.fail("cuFileBatchIOGetStatus failed"), false;
      auto now = Clock::now();
      for (unsigned k = 0; k < got; ++k) {
        size_t j = reinterpret_cast<size_t>(events[k].cookie);
        ssize_t n =
            events[k].status == CUFILE_COMPLETE ? static_cast<ssize_t>(events[k].ret) : -1;
        stats.latency_us.push_back(micros(round.submitted, now));
        if (!io_completed(run, lanes[j], round.blocks[j], n)) return false;
        count_done(run, stats, round.blocks[j].length);
      }
      reaped += got;
    }
    return true;
  }
  void close(RunState& run) override {
    if (!batch_) return;
    if (run.failed()) cuFileBatchIOCancel(batch_);
    cuFileBatchIODestroy(batch_);
  }

 private:
  CUfileBatchHandle_t batch_ = nullptr;
  std::vector<CUfileIOParams_t> params_;
};

// -x 7: the stream API for a whole round on one stream. The stream API reads its arguments
// (by pointer) when the IO runs, so each slot keeps its own, alive until the synchronisation.
// Without a driver there are no streams: synchronous cuFileRead/Write stand in.
class StreamBatcher : public Batcher {
 public:
  using Batcher::Batcher;
  bool open(const Gpu& gpu, size_t slots) override {
    args_.assign(slots, Args{});
    if (!gpu.drv) return true;
    if (!stream_.create(gpu))
      return std::fprintf(stderr, "gpufile bench: cuStreamCreate failed\n"), false;
    CUfileError_t e = cuFileStreamRegister(stream_.cufile(), 0);
    if ((stream_registered_ = e.err == CU_FILE_SUCCESS)) return true;
    std::fprintf(stderr, "gpufile bench: cuFileStreamRegister: %s\n", CUFILE_ERRSTR(e.err));
    return false;
  }
  bool submit(RunState& run, std::vector<Lane>& lanes, const BatchRound& round) override {
    const bool writing = is_write(run.type);
    for (size_t j : round.lanes) {
      const Block& b = round.blocks[j];
      Args& a = args_[j];
      a = Args{b.length, static_cast<off_t>(b.offset), slot(j), 0};
      if (!stream_.get()) {
        a.done = writing ? cuFileWrite(lanes[j].handle, buf_.ptr(), a.size, a.file_off, a.buf_off)
                         : cuFileRead(lanes[j].handle, buf_.ptr(), a.size, a.file_off, a.buf_off);
        continue;
      }
      auto call = writing ? cuFileWriteAsync : cuFileReadAsync;
      CUfileError_t e = call(lanes[j].handle, buf_.ptr(), &a.size, &a.file_off, &a.buf_off,
                             &a.done, stream_.cufile());
      if (e.err != CU_FILE_SUCCESS) {
        stream_.sync();  // what was queued before still points into args_
        run.fail(std::string(writing ? "cuFileWriteAsync" : "cuFileReadAsync") + " at " +
                 at(lanes[j], b) + ": " + CUFILE_ERRSTR(e.err));
        return false;
      }
    }
    return true;
  }
  // One synchronisation for the round: every IO's latency is submission to that moment.
  bool reap(RunState& run, std::vector<Lane>& lanes, const BatchRound& round,
            LaneStats& stats) override {
    if (!stream_.sync()) return run.fail("cuStreamSynchronize failed"), false;
    auto now = Clock::now();
    for (size_t j : round.lanes) {
      stats.latency_us.push_back(micros(round.submitted, now));
      if (!io_completed(run, lanes[j], round.blocks[j], args_[j].done)) return false;
      count_done(run, stats, round.blocks[j].length);
    }
    return true;
  }
  void close(RunState&) override {
    stream_.sync();
    if (stream_registered_) cuFileStreamDeregister(stream_.cufile());
    stream_.destroy();
  }

 private:
  struct Args {
    size_t size;
    off_t file_off;
    off_t buf_off;
    ssize_t done;
  };
  std::vector<Args> args_;  // by lane; never resized while IOs are queued
  Stream stream_;
  bool stream_registered_ = false;
};

// Takes the next block of every lane that still has one (staging -V data for writes);
// false when none has, or staging failed.
bool fill_round(RunState& run, std::vector<Lane>& lanes, const Buffer& buf,
                std::vector<char>* scratch, BatchRound* round) {
  round->lanes.clear();
  const bool writing = is_write(run.type);
  for (size_t j = 0; j < lanes.size(); ++j) {
    if (!run.timed() && lanes[j].pass_done()) continue;
    bool wrapped = false;
    Block b = lanes[j].next(&wrapped);
    round->blocks[j] = b;
    if (writing && run.opt.verify &&
        !stage_block(run, buf, j * run.opt.io_size, lanes[j], b, scratch))
      return false;
    round->lanes.push_back(j);
  }
  return !round->lanes.empty();
}

bool check_round(RunState& run, std::vector<Lane>& lanes, const Buffer& buf,
                 const BatchRound& round, std::vector<char>* scratch) {
  for (size_t j : round.lanes)
    if (!check_read(run, buf, j * run.opt.io_size, lanes[j], round.blocks[j], scratch))
      return false;
  return true;
}

void drive_batches(RunState& run, Batcher& batcher, std::vector<Lane>& lanes,
                   const Buffer& buf, LaneStats& stats) {
  BatchRound round;
  round.blocks.resize(lanes.size());
  std::vector<char> scratch(run.opt.verify ? run.opt.io_size : 0);
  const bool check = run.opt.verify && !is_write(run.type);
  while (!run.should_stop() && fill_round(run, lanes, buf, &scratch, &round)) {
    round.submitted = Clock::now();
    if (!batcher.submit(run, lanes, round) || !batcher.reap(run, lanes, round, stats)) return;
    if (check && !check_round(run, lanes, buf, round, &scratch)) return;
  }
}

std::unique_ptr<Batcher> make_batcher(Xfer x, const Buffer& buf, uint64_t slot_bytes) {
  if (x == Xfer::gpu_batch_stream) return std::make_unique<StreamBatcher>(buf, slot_bytes);
  return std::make_unique<CuFileBatcher>(buf, slot_bytes);
}

}  // namespace

bool run_batch(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes, LaneStats* stats,
               const std::function<bool()>& start) {
  pin_to_node(run);  // this thread is the batch's IO thread
  Buffer buf;
  if (!buf.allocate(io_memory(run.opt), gpu, run.opt.io_size * lanes.size()) ||
      !fill_noise(buf, run.opt.seed) || !register_buffer(buf, run.opt))
    return std::fprintf(stderr, "gpufile bench: could not set up the batch buffer\n"), false;
  auto batcher = make_batcher(run.opt.xfer, buf, run.opt.io_size);
  const bool opened = batcher->open(gpu, lanes.size());
  if (opened && start()) {
    drive_batches(run, *batcher, lanes, buf, *stats);
    stats->ended = Clock::now();
    run.finish(stats->ended);
  }
  batcher->close(run);
  deregister_buffer(buf, run.opt);
  return opened;
}

}  // namespace gpufile::cli::benchmark
