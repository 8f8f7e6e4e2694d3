// core/stats: counters, levels, start/stop, reset, histogram buckets and derived rates.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
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


// ---- latency histograms and per-device rows ----------------------------------------------------

constexpr uint64_t kUs = 1000;  // ns

TEST(StatsLatencyBuckets, Log2OfMicroseconds) {
  struct Case {
    uint64_t ns;
    int bucket;
  };
  const Case cases[] = {
      {0, 0},                                   // 0 us
      {999, 0},                                 // under 1 us
      {1 * kUs, 1},                             // exactly 2^0 us
      {2 * kUs - 1, 1},
      {2 * kUs, 2},                             // exactly 2^1 us
      {3 * kUs, 2},
      {4 * kUs, 3},                             // exactly 2^2 us
      {1024 * kUs, 11},                         // exactly 2^10 us
      {1023 * kUs, 10},
      {(uint64_t{1} << 29) * kUs, 30},          // the last bounded bucket
      {((uint64_t{1} << 30) - 1) * kUs, 30},
      {(uint64_t{1} << 30) * kUs, 31},          // 2^30 us: the open-ended bucket
      {UINT64_MAX, 31},
  };
  for (const Case& c : cases) EXPECT_EQ(latency_bucket(c.ns), c.bucket) << c.ns << " ns";
}

TEST(StatsLatencyBuckets, UpperBounds) {
  EXPECT_EQ(latency_bucket_below_us(0), 1u);
  EXPECT_EQ(latency_bucket_below_us(1), 2u);
  EXPECT_EQ(latency_bucket_below_us(11), 2048u);
  EXPECT_EQ(latency_bucket_below_us(30), uint64_t{1} << 30);
  EXPECT_EQ(latency_bucket_below_us(31), 0u);  // no upper bound
  EXPECT_EQ(latency_bucket_below_us(-1), 0u);
  // Every bucket's calls stay under its bound: the last call that lands in it is just below.
  for (int k = 0; k < kLatencyBuckets - 1; ++k)
    EXPECT_EQ(latency_bucket(latency_bucket_below_us(k) * kUs - 1), k) << k;
}

struct PercentileCase {
  const char* name;
  std::vector<std::pair<int, uint64_t>> counts;  // bucket, calls
  double q;
  int bucket;
  uint64_t us;
};

TEST(StatsPercentiles, FromBuckets) {
  const PercentileCase cases[] = {
      {"empty", {}, 0.5, -1, 0},
      {"empty max", {}, 1.0, -1, 0},
      {"one call", {{5, 1}}, 0.5, 5, 32},
      {"one call max", {{5, 1}}, 1.0, 5, 32},
      {"under 1 us", {{0, 3}}, 0.99, 0, 1},
      {"median of two: the first", {{0, 1}, {1, 1}}, 0.5, 0, 1},
      {"just past the median", {{0, 1}, {1, 1}}, 0.51, 1, 2},
      {"p50 of 1000", {{3, 990}, {10, 9}, {31, 1}}, 0.5, 3, 8},
      {"p99 of 1000: rank 990", {{3, 990}, {10, 9}, {31, 1}}, 0.99, 3, 8},
      {"p99.9 of 1000: rank 999", {{3, 990}, {10, 9}, {31, 1}}, 0.999, 10, 1024},
      {"max in the open bucket", {{3, 990}, {10, 9}, {31, 1}}, 1.0, 31, uint64_t{1} << 30},
      {"q near 0 is the fastest", {{4, 1}, {9, 1}}, 0.000001, 4, 16},
  };
  for (const PercentileCase& c : cases) {
    uint64_t hist[kLatencyBuckets] = {};
    for (const auto& [k, n] : c.counts) hist[k] = n;
    EXPECT_EQ(percentile_bucket(hist, c.q), c.bucket) << c.name;
    EXPECT_EQ(percentile_us(hist, c.q), c.us) << c.name;
  }
}

TEST(StatsPercentiles, Json) {
  uint64_t hist[kLatencyBuckets] = {};
  EXPECT_NE(latency_json(hist).find("\"p50_us\": null"), std::string::npos);
  hist[2] = 9;
  hist[31] = 1;
  const std::string j = latency_json(hist);
  EXPECT_NE(j.find("\"buckets\": [0, 0, 9, 0"), std::string::npos) << j;
  EXPECT_NE(j.find("\"p50_us\": 4"), std::string::npos) << j;
  EXPECT_NE(j.find("\"p90_us\": 4,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"p99_us\": 1073741824"), std::string::npos) << j;
  EXPECT_NE(j.find("\"max_us\": 1073741824"), std::string::npos) << j;
}

TEST(StatsDevices, Rows) {
  EXPECT_EQ(device_row(0), 0);
  EXPECT_EQ(device_row(kMaxGpus - 1), kMaxGpus - 1);
  EXPECT_EQ(device_row(kMaxGpus), kOtherGpusRow);
  EXPECT_EQ(device_row(1000), kOtherGpusRow);
  EXPECT_EQ(device_row(-1), kHostRow);
  EXPECT_EQ(device_row_name(3), "3");
  EXPECT_EQ(device_row_name(kHostRow), "host");
  EXPECT_EQ(device_row_name(kOtherGpusRow), "other_gpus");
}

TEST(StatsPaths, NamesFollowTheList) {
  EXPECT_STREQ(kPathNames[static_cast<int>(Path::staged_direct)], "staged_direct");
  EXPECT_STREQ(kPathNames[static_cast<int>(Path::page_cache_dma)], "page_cache_dma");
  EXPECT_STREQ(kPathNames[static_cast<int>(Path::remote)], "remote");
}

TEST_F(StatsTest, WithStatsOffNoClockAndNoCounter) {
  EXPECT_EQ(call_started(), 0u);  // no clock read: 0 stands for "not timed"
  EXPECT_EQ(since(0), 0u);
  record_finished(Op::read, Path::page_cache, 0, 4096, 12345, true);
  record_latency(Op::read, Path::page_cache, 5 * kUs);
  record_device(Op::read, 0, 4096, true);
  const Snapshot s = snapshot();
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::page_cache)].latency_hist[3], 0u);
  EXPECT_EQ(s.devices[0][kRead].calls.ok, 0u);
  ASSERT_TRUE(set_level(1));
  EXPECT_GT(call_started(), 0u);
}

TEST_F(StatsTest, LevelTwoTimesCallsPerPathLevelThreeCountsDevices) {
  ASSERT_TRUE(set_level(1));
  record_latency(Op::read, Path::page_cache, 5 * kUs);
  EXPECT_EQ(snapshot().paths[kRead][static_cast<int>(Path::page_cache)].latency_hist[3], 0u);
  ASSERT_TRUE(set_level(2));
  record_latency(Op::read, Path::page_cache, 5 * kUs);
  record_latency(Op::read, Path::remote, 0);
  record_latency(Op::write, Path::staged_direct, 3000 * kUs);
  record_device(Op::read, 0, 4096, true);  // level 2: no device rows yet
  Snapshot s = snapshot();
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::page_cache)].latency_hist[3], 1u);
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::remote)].latency_hist[0], 1u);
  EXPECT_EQ(s.paths[kWrite][static_cast<int>(Path::staged_direct)].latency_hist[12], 1u);
  EXPECT_EQ(s.devices[0][kRead].calls.ok, 0u);
  uint64_t all[kLatencyBuckets] = {};
  add_latency(s, Op::read, all);
  EXPECT_EQ(all[3], 1u);
  EXPECT_EQ(all[0], 1u);
  EXPECT_EQ(all[12], 0u);  // a write

  ASSERT_TRUE(set_level(3));
  record_device(Op::read, 0, 4096, true);
  record_device(Op::read, 0, 4096, false);  // failed: a call, no bytes
  record_device(Op::write, 1, 100, true);
  record_device(Op::read, -1, 7, true);
  record_device(Op::read, 40, 9, true);
  s = snapshot();
  EXPECT_EQ(s.devices[0][kRead].calls.ok, 1u);
  EXPECT_EQ(s.devices[0][kRead].calls.err, 1u);
  EXPECT_EQ(s.devices[0][kRead].bytes, 4096u);
  EXPECT_EQ(s.devices[1][kWrite].bytes, 100u);
  EXPECT_EQ(s.devices[1][kRead].calls.ok, 0u);
  EXPECT_EQ(s.devices[kHostRow][kRead].bytes, 7u);
  EXPECT_EQ(s.devices[kOtherGpusRow][kRead].bytes, 9u);
  EXPECT_TRUE(device_row_used(s, 0));
  EXPECT_FALSE(device_row_used(s, 2));
  const std::string j = devices_json(s);
  EXPECT_EQ(j.find("\"2\""), std::string::npos) << j;  // rows without IO are left out
  EXPECT_NE(j.find("\"0\": {\"read\": {\"calls_ok\": 1, \"calls_failed\": 1, \"bytes\": 4096}"),
            std::string::npos) << j;
  EXPECT_NE(j.find("\"host\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"other_gpus\""), std::string::npos) << j;
}

TEST_F(StatsTest, RecordFinishedTimesFromItsStart) {
  ASSERT_TRUE(set_level(3));
  const uint64_t started = call_started();
  ASSERT_GT(started, 0u);
  record_finished(Op::read, Path::small_io, 2, 512, started, true);
  record_finished(Op::read, Path::small_io, 2, 512, started, false);  // failed: not timed
  record_finished(Op::read, Path::small_io, 2, 512, 0, true);        // begun with stats off
  const Snapshot s = snapshot();
  uint64_t timed = 0;
  for (uint64_t n : s.paths[kRead][static_cast<int>(Path::small_io)].latency_hist) timed += n;
  EXPECT_EQ(timed, 1u);
  EXPECT_EQ(s.devices[2][kRead].calls.ok, 1u);  // not the one begun with stats off
  EXPECT_EQ(s.devices[2][kRead].calls.err, 1u);
  EXPECT_EQ(s.devices[2][kRead].bytes, 512u);
}

TEST_F(StatsTest, ResetZeroesHistogramsAndDevices) {
  ASSERT_TRUE(set_level(3));
  record_latency(Op::read, Path::remote, 10 * kUs);
  record_device(Op::write, 0, 1, true);
  reset();
  const Snapshot s = snapshot();
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::remote)].latency_hist[4], 0u);
  EXPECT_EQ(s.devices[0][kWrite].calls.ok, 0u);
  EXPECT_EQ(s.devices[0][kWrite].bytes, 0u);
}

TEST_F(StatsTest, ConcurrentLatencyAndDeviceCountsAreExact) {
  ASSERT_TRUE(set_level(3));
  constexpr int kThreads = 8;
  constexpr int kCalls = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kCalls; ++i) {
        record_latency(Op::write, Path::page_cache, 100 * kUs);
        record_device(Op::write, t % 2, 10, true);
      }
    });
  for (auto& th : threads) th.join();
  const Snapshot s = snapshot();
  const uint64_t n = uint64_t{kThreads} * kCalls;
  EXPECT_EQ(s.paths[kWrite][static_cast<int>(Path::page_cache)].latency_hist[7], n);
  EXPECT_EQ(s.devices[0][kWrite].calls.ok + s.devices[1][kWrite].calls.ok, n);
  EXPECT_EQ(s.devices[0][kWrite].bytes, n / 2 * 10);
}

TEST_F(StatsTest, SummaryJsonCarriesLatencyDevicesAndTheRemotePath) {
  ASSERT_TRUE(set_level(3));
  record_path(Op::read, Path::remote, 4096);
  record_latency(Op::read, Path::remote, 3 * kUs);
  record_device(Op::read, -1, 4096, true);
  const std::string j = summary_json(snapshot(), 0);
  EXPECT_NE(j.find("\"remote\": {\"bytes\": 4096, \"ops\": 1, \"latency\": {\"buckets\": [0, 0, 1,"),
            std::string::npos) << j;
  EXPECT_NE(j.find("\"latency\": {\"buckets\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"p50_us\": 4"), std::string::npos) << j;
  EXPECT_NE(j.find("\"devices\": {\"host\": {\"read\": {\"calls_ok\": 1"), std::string::npos) << j;
}

TEST_F(StatsTest, SummaryJsonCarriesTheBatchCounters) {
  ASSERT_TRUE(set_level(1));
  record_batch_setup(true);
  record_batch_submit(true, 3, 12288, 0, 2 * kUs);
  record_batch_submit(false, 0, 0, 0, 0);
  record_batch_complete(Op::read, 4096, 10 * kUs, true);
  record_batch_complete(Op::read, 0, 0, false);
  const std::string j = summary_json(snapshot(), 0);
  EXPECT_NE(j.find("\"batch\": {\"setup_ok\": 1, \"setup_failed\": 0, \"submit_ok\": 1, "
                   "\"submit_failed\": 1, \"entries_submitted\": 3, \"entries_ok\": 1, "
                   "\"entries_failed\": 1,"),
            std::string::npos) << j;
  EXPECT_NE(j.find("\"read_bytes\": 4096, \"write_bytes\": 0, \"submit_latency_avg_us\": 2, "
                   "\"completion_latency_avg_us\": 10}"),
            std::string::npos) << j;
}

}  // namespace
}  // namespace gpufile::stats
