// `gpufile bench -i`: single sizes and MIN:MAX:STEP ranges, what a run may do with them, and
// how lanes cut a data set into blocks of varying size.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "cli/bench/io_sizes.hpp"
#include "cli/bench/lanes.hpp"
#include "cli/bench/options.hpp"
#include "tests/cli/bench_args.hpp"
#include "cli/bench/report.hpp"
#include "cli/bench/sweep.hpp"

namespace gpufile::cli::benchmark {
namespace {

constexpr uint64_t KiB = 1024;

IoSizes parsed(const std::string& text) {
  IoSizes s;
  std::string why;
  EXPECT_TRUE(parse_io_sizes(text, &s, &why)) << text << ": " << why;
  return s;
}

std::string refusal(const std::string& text) {
  IoSizes s;
  std::string why;
  EXPECT_FALSE(parse_io_sizes(text, &s, &why)) << text;
  return why;
}

TEST(BenchIoSizes, SingleSizeIsFixed) {
  IoSizes s = parsed("64K");
  EXPECT_EQ(s.min, 64 * KiB);
  EXPECT_EQ(s.max, 64 * KiB);
  EXPECT_FALSE(s.varies());
  EXPECT_EQ(s.granule(), 64 * KiB);
  EXPECT_EQ(s.describe(), "65536");
}

TEST(BenchIoSizes, RangeHasMinMaxStep) {
  IoSizes s = parsed("4K:1M:4K");
  EXPECT_EQ(s.min, 4 * KiB);
  EXPECT_EQ(s.max, 1024 * KiB);
  EXPECT_EQ(s.step, 4 * KiB);
  EXPECT_TRUE(s.varies());
  EXPECT_EQ(s.choices(), 256u);
  EXPECT_EQ(s.describe(), "4096:1048576:4096");
}

TEST(BenchIoSizes, GranuleIsGcdOfMinAndStep) {
  EXPECT_EQ(parsed("12K:60K:8K").granule(), 4 * KiB);
  EXPECT_EQ(parsed("1M:4M:1M").granule(), 1024 * KiB);  // the guide's example
}

TEST(BenchIoSizes, RangeOfOneSizeIsFixed) {
  IoSizes s = parsed("64K:64K:4K");
  EXPECT_FALSE(s.varies());
  EXPECT_EQ(s.granule(), 64 * KiB);
}

TEST(BenchIoSizes, MalformedRangesAreRefused) {
  EXPECT_NE(refusal("4K:64K").find("MIN:MAX:STEP"), std::string::npos);
  EXPECT_NE(refusal("4K:64K:4K:4K").find("MIN:MAX:STEP"), std::string::npos);
  EXPECT_NE(refusal("64K:4K:4K").find("larger than MAX"), std::string::npos);
  EXPECT_NE(refusal("4K:64K:0").find("STEP"), std::string::npos);
  EXPECT_NE(refusal("0:64K:4K").find("MIN"), std::string::npos);
  EXPECT_NE(refusal("4K:64K:24K").find("whole steps"), std::string::npos);
  EXPECT_NE(refusal("4K::4K").find("MAX"), std::string::npos);
  EXPECT_NE(refusal("lots").find("not a size"), std::string::npos);
  EXPECT_NE(refusal("0").find("not a size"), std::string::npos);
  refusal("");
}

TEST(BenchIoSizes, DrawsOnlySizesOfTheSeriesAndEachOfThem) {
  const IoSizes s = parsed("4K:32K:4K");
  std::mt19937_64 rng(7);
  std::set<uint64_t> seen;
  for (int k = 0; k < 2000; ++k) {
    const uint64_t size = s.draw(rng);
    ASSERT_GE(size, s.min);
    ASSERT_LE(size, s.max);
    ASSERT_EQ((size - s.min) % s.step, 0u);
    seen.insert(size);
  }
  EXPECT_EQ(seen.size(), s.choices());
}

TEST(BenchIoSizes, FixedSizeDrawsItself) {
  const IoSizes s = parsed("1M");
  std::mt19937_64 rng(1);
  EXPECT_EQ(s.draw(rng), 1024 * KiB);
}

TEST(BenchIoSizes, ODirectNeedsRangesInWhole4KiB) {
  const IoSizes odd = parsed("4K:12K:2K");
  EXPECT_NE(io_sizes_problem(odd, true, false).find("4 KiB"), std::string::npos);
  EXPECT_EQ(io_sizes_problem(odd, false, false), "");  // through the page cache
  EXPECT_EQ(io_sizes_problem(parsed("8K:64K:4K"), true, false), "");
  EXPECT_EQ(io_sizes_problem(parsed("1000"), true, false), "");  // single sizes as before
}

TEST(BenchIoSizes, VerifyNeedsRoomForTheBlockHeader) {
  EXPECT_NE(io_sizes_problem(parsed("32"), false, true).find("-V"), std::string::npos);
  EXPECT_NE(io_sizes_problem(parsed("32:4096:32"), false, true).find("-V"), std::string::npos);
  EXPECT_EQ(io_sizes_problem(parsed("64"), false, true), "");
}

// ---- the flag -------------------------------------------------------------------------

using test_support::parse;

TEST(BenchIoSizes, FlagSetsTheRangeAndSizesBuffersForMax) {
  Options o;
  ASSERT_TRUE(parse({"-f", "x", "-s", "8M", "-i", "4K:1M:4K"}, &o));
  EXPECT_EQ(o.io_size, 1024 * KiB);  // every buffer is sized by io_size
  EXPECT_EQ(o.io_min, 4 * KiB);
  EXPECT_EQ(o.io_step, 4 * KiB);
  const IoSizes s = io_sizes_of(o);
  EXPECT_TRUE(s.varies());
  EXPECT_EQ(s.min, 4 * KiB);
}

TEST(BenchIoSizes, FlagRefusesBadRanges) {
  for (const char* bad : {"4K:1K:1K", "4K:64K", "4K:64K:0", "4K:12K:2K"}) {
    Options o;
    EXPECT_FALSE(parse({"-f", "x", "-s", "8M", "-i", bad}, &o)) << bad;
  }
  Options buffered;  // -O 1: no O_DIRECT, so 2 KiB steps are fine
  EXPECT_TRUE(parse({"-f", "x", "-s", "8M", "-i", "4K:12K:2K", "-O", "1"}, &buffered));
  Options cached;
  EXPECT_TRUE(parse({"-f", "x", "-s", "8M", "-i", "4K:12K:2K", "-x", "4"}, &cached));
  Options verify;
  EXPECT_FALSE(parse({"-f", "x", "-s", "8M", "-i", "32", "-O", "1", "-V"}, &verify));
}

TEST(BenchIoSizes, RangesAreForIoSizeOnly) {
  Options o;
  EXPECT_FALSE(parse({"-f", "x", "-s", "4K:8K:4K", "-i", "4K"}, &o));
}

TEST(BenchIoSizes, SweepReplacesTheRangeButPlainRunsKeepIt) {
  Options o;
  ASSERT_TRUE(parse({"-f", "x", "-s", "8M", "-i", "4K:64K:4K", "--sweep-threads", "1,2"}, &o));
  for (const Options& point : sweep_points(o)) EXPECT_TRUE(io_sizes_of(point).varies());
  Options s;
  ASSERT_TRUE(parse({"-f", "x", "-s", "8M", "-i", "4K:64K:4K", "--sweep-io", "4K,1M"}, &s));
  const std::vector<Options> points = sweep_points(s);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_FALSE(io_sizes_of(points[1]).varies());
  EXPECT_EQ(points[1].io_size, 1024 * KiB);
}

// ---- lanes -------------------------------------------------------------------------------

std::vector<Block> one_pass(Lane& lane) {
  std::vector<Block> blocks;
  bool wrapped = false;
  while (!lane.pass_done()) blocks.push_back(lane.next(&wrapped));
  return blocks;
}

TEST(BenchIoSizes, LaneTilesItsRangeWithDrawnSizes) {
  const IoSizes s = parsed("4K:64K:4K");
  Lane lane;
  lane.plan(1 * KiB * KiB, 9 * KiB * KiB, s, false, 42);
  const std::vector<Block> blocks = one_pass(lane);
  uint64_t at = 1 * KiB * KiB;
  std::set<uint64_t> sizes;
  for (size_t k = 0; k < blocks.size(); ++k) {
    ASSERT_EQ(blocks[k].offset, at);
    const bool last = k + 1 == blocks.size();  // cut short where the lane ends
    if (!last) {
      ASSERT_EQ((blocks[k].length - s.min) % s.step, 0u);
    }
    ASSERT_LE(blocks[k].length, s.max);
    sizes.insert(blocks[k].length);
    at += blocks[k].length;
  }
  EXPECT_EQ(at, 9 * KiB * KiB);
  EXPECT_GT(sizes.size(), 4u);  // the sizes do vary
}

TEST(BenchIoSizes, RandomPassMeetsTheBlocksOfASequentialOne) {
  // A -V read-back (random or not) must meet exactly the blocks the write left.
  const IoSizes s = parsed("4K:128K:4K");
  Lane seq, rnd;
  seq.plan(0, 4 * KiB * KiB, s, false, 9);
  rnd.plan(0, 4 * KiB * KiB, s, true, 9);
  std::vector<Block> a = one_pass(seq), b = one_pass(rnd);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_FALSE(std::equal(a.begin(), a.end(), b.begin(), [](const Block& x, const Block& y) {
    return x.offset == y.offset;
  }));  // shuffled
  auto by_offset = [](const Block& x, const Block& y) { return x.offset < y.offset; };
  std::sort(b.begin(), b.end(), by_offset);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].offset, b[k].offset);
    EXPECT_EQ(a[k].length, b[k].length);
  }
}

TEST(BenchIoSizes, SameSeedSameLayoutOtherSeedAnother) {
  const IoSizes s = parsed("4K:128K:4K");
  Lane a, b, c;
  a.plan(0, KiB * KiB, s, false, 5);
  b.plan(0, KiB * KiB, s, false, 5);
  c.plan(0, KiB * KiB, s, false, 6);
  std::vector<Block> x = one_pass(a), y = one_pass(b), z = one_pass(c);
  ASSERT_EQ(x.size(), y.size());
  for (size_t k = 0; k < x.size(); ++k) EXPECT_EQ(x[k].length, y[k].length);
  bool differs = x.size() != z.size();
  for (size_t k = 0; !differs && k < x.size(); ++k) differs = x[k].length != z[k].length;
  EXPECT_TRUE(differs);
}

TEST(BenchIoSizes, SharedFileSlicesAreWholeGranules) {
  Options o;
  ASSERT_TRUE(parse({"-f", "x", "-s", "10M", "-w", "3", "-i", "8K:64K:4K"}, &o));
  std::vector<Lane> lanes;
  ASSERT_TRUE(plan_lanes(o, IoType::read, &lanes));
  ASSERT_EQ(lanes.size(), 3u);
  uint64_t covered = 0;
  for (size_t t = 0; t < lanes.size(); ++t) {
    const std::vector<Block> blocks = one_pass(lanes[t]);
    for (const Block& b : blocks) {
      EXPECT_EQ(b.offset % 4096, 0u);  // O_DIRECT alignment kept all along
      covered += b.length;
    }
  }
  EXPECT_EQ(covered, 10 * KiB * KiB);
}

// ---- results -----------------------------------------------------------------------------

Result part(int threads, uint64_t io, uint64_t ops, double seconds) {
  Result r;
  r.threads = threads;
  r.io_size = r.io_min = r.io_max = io;
  r.done_bytes = r.total_bytes = io * ops;
  r.seconds = seconds;
  r.latency_us.assign(ops, 10.0);
  return r;
}

TEST(BenchIoSizes, CombinedResultsAddUpAndTakeTheLongestTime) {
  Result a = part(2, 64 * KiB, 10, 1.0), b = part(3, 64 * KiB, 30, 2.0);
  a.job = "job1";
  const Result all = combine_results({a, b});
  EXPECT_EQ(all.job, "");
  EXPECT_EQ(all.threads, 5);
  EXPECT_EQ(all.done_bytes, 40 * 64 * KiB);
  EXPECT_EQ(all.total_bytes, 40 * 64 * KiB);
  EXPECT_EQ(all.latency_us.size(), 40u);
  EXPECT_DOUBLE_EQ(all.seconds, 2.0);
  EXPECT_EQ(all.io_size, 64 * KiB);  // one size: as given
}

TEST(BenchIoSizes, CombinedResultsOfManySizesReportTheMeanIo) {
  const Result all = combine_results({part(1, 4 * KiB, 10, 1.0), part(1, 64 * KiB, 10, 1.0)});
  EXPECT_EQ(all.io_size, 34 * KiB);  // (10 x 4K + 10 x 64K) / 20 IOs
  EXPECT_EQ(all.io_min, 4 * KiB);
  EXPECT_EQ(all.io_max, 64 * KiB);
}

}  // namespace
}  // namespace gpufile::cli::benchmark
