// Job's pieces: claimed from the front by the workers and (a read making page-cache windows
// ahead) from the back by its caller; every piece goes to exactly one claimer, and the claimer
// of the last one left is the one told so.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "exec/job.hpp"

namespace gpufile::exec {
namespace {

void cut(Job& j, uint64_t off, uint64_t len, uint64_t step) {
  j.file_off = off;
  j.len = len;
  j.file.align.offset = 4096;
  j.split(step);
}

TEST(JobPieces, FrontAndBackMeetWithEveryPieceTakenOnce) {
  Job j;
  cut(j, 4096, 10 * 8192 - 100, 8192);  // ten pieces, the last one short
  ASSERT_EQ(j.pieces(), 10u);
  std::vector<Chunk> got;
  Chunk c;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(j.claim_back(&c));
    got.push_back(c);
    ASSERT_TRUE(j.claim(&c));
    got.push_back(c);
  }
  EXPECT_EQ(got[0].off, 4096 + 9 * 8192u) << "the back starts at the last piece";
  EXPECT_EQ(got[0].len, 8192u - 100) << "which is the short one";
  EXPECT_EQ(got[1].off, 4096u);
  EXPECT_EQ(got[2].off, 4096 + 8 * 8192u);
  while (j.claim_back(&c)) got.push_back(c);
  EXPECT_FALSE(j.claim(&c));
  ASSERT_EQ(got.size(), 10u);
  std::vector<int> seen(10, 0);
  uint64_t bytes = 0;
  for (const Chunk& p : got) {
    ++seen[(p.off - 4096) / 8192];
    bytes += p.len;
  }
  EXPECT_EQ(seen, std::vector<int>(10, 1));
  EXPECT_EQ(bytes, j.len);
}

TEST(JobPieces, ClaimsRacingFromBothEndsTakeEachPieceOnce) {
  constexpr uint32_t kPieces = 20000;
  for (int round = 0; round < 20; ++round) {
    Job j;
    cut(j, 0, uint64_t{kPieces} * 4096, 4096);
    std::vector<std::atomic<int>> taken(kPieces);
    auto claimer = [&](bool back) {
      Chunk c;
      while (back ? j.claim_back(&c) : j.claim(&c)) taken[c.off / 4096].fetch_add(1);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back(claimer, t == 0);
    for (auto& t : threads) t.join();
    for (uint32_t k = 0; k < kPieces; ++k) ASSERT_EQ(taken[k].load(), 1) << "piece " << k;
  }
}

}  // namespace
}  // namespace gpufile::exec
