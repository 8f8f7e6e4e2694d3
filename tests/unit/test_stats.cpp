// core/stats: counters, levels, start/stop, reset, histogram buckets and derived rates.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/stats.hpp"

namespace gpufile::stats {
namespace {

constexpr int kRead = static_cast<int>(Op::read);
constexpr int kWrite = static_cast<int>(Op::write);

class StatsTest : public ::testing::Test {
 protected:
  void SetUp() override { restore(); }
  void TearDown() override { restore(); }
  static void restore() {
    set_level(0);
    start();
    reset();
  }
};

TEST_F(StatsTest, LevelZeroCountsOnlyPaths) {
  record_call(Op::read, 4096, 1000, true);
  record_handle_register(true);
  record_batch_setup(true);
  record_path(Op::read, Path::page_cache, 4096);
  Snapshot s = snapshot();
  EXPECT_EQ(s.ops[kRead].calls.ok, 0u);
  EXPECT_EQ(s.ops[kRead].bytes, 0u);
  EXPECT_EQ(s.handle_register.ok, 0u);
  EXPECT_EQ(s.batch.setup.ok, 0u);
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::page_cache)].bytes, 4096u);
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::page_cache)].ops, 1u);
  EXPECT_FALSE(collecting());
}

TEST_F(StatsTest, LevelRange) {
  EXPECT_FALSE(set_level(-1));
  EXPECT_FALSE(set_level(4));
  EXPECT_EQ(level(), 0);
  for (int l = 0; l <= kMaxLevel; ++l) {
    EXPECT_TRUE(set_level(l));
    EXPECT_EQ(level(), l);
    EXPECT_EQ(snapshot().level, l);
  }
}

TEST_F(StatsTest, LevelOneCountsCallsButNoHistogram) {
  ASSERT_TRUE(set_level(1));
  EXPECT_TRUE(collecting(1));
  EXPECT_FALSE(collecting(2));
  record_call(Op::read, 1 << 20, 2'000'000, true);
  record_call(Op::read, 4096, 1'000'000, true);
  record_call(Op::read, 4096, 5, false);  // failed: counted, no bytes, no latency
  record_call(Op::write, 8192, 3'000, true);
  Snapshot s = snapshot();
  EXPECT_EQ(s.ops[kRead].calls.ok, 2u);
  EXPECT_EQ(s.ops[kRead].calls.err, 1u);
  EXPECT_EQ(s.ops[kRead].bytes, (1u << 20) + 4096u);
  EXPECT_EQ(s.ops[kRead].latency_ns, 3'000'000u);
  EXPECT_EQ(s.ops[kWrite].calls.ok, 1u);
  EXPECT_EQ(s.ops[kWrite].bytes, 8192u);
  EXPECT_GT(s.ops[kRead].last_end_ns, s.ops[kRead].first_start_ns);
  for (uint64_t n : s.ops[kRead].size_hist) EXPECT_EQ(n, 0u);
}

TEST_F(StatsTest, LevelTwoFillsTheSizeHistogram) {
  ASSERT_TRUE(set_level(2));
  record_call(Op::read, 4096, 10, true);
  record_call(Op::read, 4096, 10, true);
  record_call(Op::read, 1 << 20, 10, true);
  record_call(Op::write, 512, 10, true);
  Snapshot s = snapshot();
  EXPECT_EQ(s.ops[kRead].size_hist[2], 2u);   // 4 KiB
  EXPECT_EQ(s.ops[kRead].size_hist[10], 1u);  // 1 MiB
  EXPECT_EQ(s.ops[kWrite].size_hist[0], 1u);  // under 2 KiB
}

TEST(StatsBuckets, Log2OfKib) {
  EXPECT_EQ(size_bucket(0), 0);
  EXPECT_EQ(size_bucket(1023), 0);
  EXPECT_EQ(size_bucket(1024), 0);
  EXPECT_EQ(size_bucket(2047), 0);
  EXPECT_EQ(size_bucket(2048), 1);
  EXPECT_EQ(size_bucket(4095), 1);
  EXPECT_EQ(size_bucket(4096), 2);
  EXPECT_EQ(size_bucket(64 * 1024), 6);
  EXPECT_EQ(size_bucket(1 << 20), 10);
  EXPECT_EQ(size_bucket((1ull << 20) * 16), 14);
  EXPECT_EQ(size_bucket(1ull << 41), 31);  // 2^31 KiB
  EXPECT_EQ(size_bucket(~0ull), 31);
}

TEST_F(StatsTest, HandleBufferAndBatchCounters) {
  ASSERT_TRUE(set_level(1));
  record_handle_register(true);
  record_handle_register(false);
  record_handle_deregister(true);
  record_buffer_register(true, 1 << 20);
  record_buffer_register(false, 999);
  record_buffer_deregister(true);
  record_batch_setup(true);
  record_batch_submit(true, 3, 8192, 4096, 2'000);
  record_batch_submit(false, 9, 1, 1, 1);
  record_batch_complete(Op::read, 4096, 10'000, true);
  record_batch_complete(Op::read, 4096, 20'000, true);
  record_batch_complete(Op::write, 4096, 30'000, false);
  record_batch_cancel(true);
  record_batch_destroy(true);
  Snapshot s = snapshot();
  EXPECT_EQ(s.handle_register.ok, 1u);
  EXPECT_EQ(s.handle_register.err, 1u);
  EXPECT_EQ(s.handle_deregister.ok, 1u);
  EXPECT_EQ(s.buffer_register.ok, 1u);
  EXPECT_EQ(s.buffer_register.err, 1u);
  EXPECT_EQ(s.registered_bytes, 1u << 20);
  EXPECT_EQ(s.buffer_deregister.ok, 1u);
  EXPECT_EQ(s.batch.setup.ok, 1u);
  EXPECT_EQ(s.batch.submit.ok, 1u);
  EXPECT_EQ(s.batch.submit.err, 1u);
  EXPECT_EQ(s.batch.entries_submitted, 3u);
  EXPECT_EQ(s.batch.last_submit_bytes[kRead], 8192u);
  EXPECT_EQ(s.batch.last_submit_bytes[kWrite], 4096u);
  EXPECT_EQ(s.batch.complete.ok, 2u);
  EXPECT_EQ(s.batch.complete.err, 1u);
  EXPECT_EQ(s.batch.bytes[kRead], 8192u);
  EXPECT_EQ(s.batch.bytes[kWrite], 0u);
  EXPECT_EQ(s.batch.submit_latency_ns, 2'000u);
  EXPECT_EQ(s.batch.completion_latency_ns, 30'000u);
  EXPECT_EQ(s.batch.cancel.ok, 1u);
  EXPECT_EQ(s.batch.destroy.ok, 1u);
}

TEST_F(StatsTest, StopPausesAndStartResumes) {
  ASSERT_TRUE(set_level(1));
  EXPECT_TRUE(started());
  stop();
  EXPECT_FALSE(started());
  EXPECT_FALSE(collecting());
  EXPECT_EQ(level(), 1);  // the level survives a stop
  record_call(Op::read, 100, 1, true);
  record_path(Op::read, Path::small_io, 100);  // per-path counters never stop
  EXPECT_EQ(snapshot().ops[kRead].calls.ok, 0u);
  EXPECT_EQ(snapshot().paths[kRead][static_cast<int>(Path::small_io)].bytes, 100u);
  start();
  record_call(Op::read, 100, 1, true);
  EXPECT_EQ(snapshot().ops[kRead].calls.ok, 1u);
}

TEST_F(StatsTest, ResetZeroesEverything) {
  ASSERT_TRUE(set_level(3));
  record_call(Op::write, 4096, 10, true);
  record_path(Op::write, Path::staged_direct, 4096);
  record_buffer_register(true, 4096);
  record_batch_submit(true, 1, 0, 4096, 10);
  reset();
  Snapshot s = snapshot();
  EXPECT_EQ(s.level, 3);  // reset keeps the level
  EXPECT_EQ(s.ops[kWrite].calls.ok, 0u);
  EXPECT_EQ(s.ops[kWrite].bytes, 0u);
  EXPECT_EQ(s.ops[kWrite].first_start_ns, 0u);
  EXPECT_EQ(s.ops[kWrite].size_hist[2], 0u);
  EXPECT_EQ(s.paths[kWrite][static_cast<int>(Path::staged_direct)].bytes, 0u);
  EXPECT_EQ(s.registered_bytes, 0u);
  EXPECT_EQ(s.batch.submit.ok, 0u);
  EXPECT_EQ(s.batch.last_submit_bytes[kWrite], 0u);
}

TEST_F(StatsTest, ConcurrentRecordingIsExact) {
  ASSERT_TRUE(set_level(2));
  constexpr int kThreads = 8;
  constexpr int kCalls = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < kCalls; ++i) {
        record_call(Op::read, 4096, 100, true);
        record_path(Op::read, Path::staged_direct, 4096);
      }
    });
  for (auto& th : threads) th.join();
  Snapshot s = snapshot();
  const uint64_t n = uint64_t{kThreads} * kCalls;
  EXPECT_EQ(s.ops[kRead].calls.ok, n);
  EXPECT_EQ(s.ops[kRead].bytes, n * 4096);
  EXPECT_EQ(s.ops[kRead].latency_ns, n * 100);
  EXPECT_EQ(s.ops[kRead].size_hist[2], n);
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::staged_direct)].ops, n);
}

TEST(StatsRates, FromAnActiveWindow) {
  OpTotals op;
  op.calls.ok = 4;
  op.bytes = 2'000'000'000;        // 2 GB
  op.latency_ns = 4'000'000'000;   // 4 calls of 1 s each ...
  op.first_start_ns = 10'000'000'000;
  op.last_end_ns = 11'000'000'000;  // ... running side by side within 1 s
  Rates r = rates(op);
  EXPECT_EQ(r.bw_bytes_per_sec, 2'000'000'000u);
  EXPECT_EQ(r.ops_per_sec, 4u);
  EXPECT_EQ(r.lat_avg_us, 1'000'000u);
  EXPECT_EQ(r.lat_sum_us, 4'000'000u);
}

TEST(StatsRates, EmptyAndHugeValues) {
  Rates none = rates(OpTotals{});
  EXPECT_EQ(none.bw_bytes_per_sec, 0u);
  EXPECT_EQ(none.lat_avg_us, 0u);
  EXPECT_EQ(per_second(1, 0), 0u);
  // 1 PB in 1000 s: the product overflows 64 bits, the result does not.
  EXPECT_EQ(per_second(1'000'000'000'000'000ull, 1'000'000'000'000ull), 1'000'000'000'000u);
}

TEST(StatsRates, Batch) {
  BatchTotals b;
  b.submit.ok = 2;
  b.complete.ok = 4;
  b.bytes[kRead] = 4'000'000;
  b.bytes[kWrite] = 1'000'000;
  b.submit_latency_ns = 6'000;
  b.completion_latency_ns = 40'000'000;
  b.first_submit_ns = 1'000'000'000;
  b.last_complete_ns = 1'500'000'000;  // half a second
  BatchRates r = batch_rates(b);
  EXPECT_EQ(r.bw_bytes_per_sec[kRead], 8'000'000u);
  EXPECT_EQ(r.bw_bytes_per_sec[kWrite], 2'000'000u);
  EXPECT_EQ(r.submit_lat_avg_us, 3u);
  EXPECT_EQ(r.completion_lat_avg_us, 10'000u);
  EXPECT_EQ(r.submit_ops_per_sec, 4u);
  EXPECT_EQ(r.complete_ops_per_sec, 8u);
  EXPECT_EQ(r.submit_lat_sum_us, 6u);
  EXPECT_EQ(r.completion_lat_sum_us, 40'000u);
}

TEST(StatsPosix, StagedAndPageCachePieces) {
  Snapshot s;
  s.paths[kRead][static_cast<int>(Path::staged_direct)].ops = 5;
  s.paths[kRead][static_cast<int>(Path::page_cache)].ops = 2;
  s.paths[kRead][static_cast<int>(Path::host_direct)].ops = 100;
  s.paths[kWrite][static_cast<int>(Path::page_cache)].ops = 7;
  EXPECT_EQ(posix_ops(s, Op::read), 7u);
  EXPECT_EQ(posix_ops(s, Op::write), 7u);
}

}  // namespace
}  // namespace gpufile::stats
