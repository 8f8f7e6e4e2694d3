// How the executor cuts a request into pieces for its workers (Executor::chunk_step).
#include <gtest/gtest.h>

#include "exec/executor.hpp"

namespace gpufile::exec {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

ExecutorConfig sixteen_workers() {
  ExecutorConfig c;
  c.workers = 16;
  c.slab_bytes = 4 * MiB;
  c.min_chunk_bytes = 256 * KiB;
  return c;
}

TEST(Chunking, SmallRequestsAreCutNoFinerThanTheMinimum) {
  Executor e(sixteen_workers());
  EXPECT_EQ(e.chunk_step(100), 256 * KiB);
  EXPECT_EQ(e.chunk_step(1 * MiB), 256 * KiB);  // four workers share a 1 MiB call
}

TEST(Chunking, MidSizedRequestsAreSpreadOverEveryWorker) {
  Executor e(sixteen_workers());
  EXPECT_EQ(e.chunk_step(16 * MiB), 1 * MiB);
  EXPECT_EQ(e.chunk_step(16 * MiB + 1), 1 * MiB + 4 * KiB);  // rounded up to the 4 KiB grid
}

TEST(Chunking, LargeRequestsAreCutIntoSlabs) {
  Executor e(sixteen_workers());
  EXPECT_EQ(e.chunk_step(64 * MiB), 4 * MiB);
  EXPECT_EQ(e.chunk_step(8ull << 30), 4 * MiB);
}

TEST(Chunking, AMinimumAboveTheSlabIsCappedAtTheSlab) {
  ExecutorConfig c = sixteen_workers();
  c.min_chunk_bytes = 16 * MiB;
  Executor e(c);
  EXPECT_EQ(e.chunk_step(1 * MiB), 4 * MiB);
}

TEST(Chunking, StepsStayOnTheFourKiBGrid) {
  ExecutorConfig c = sixteen_workers();
  c.workers = 7;
  c.min_chunk_bytes = 4 * KiB;
  Executor e(c);
  for (uint64_t len : {1ull, 4095ull, 12345ull, 1000000ull, 3333333ull}) {
    uint64_t step = e.chunk_step(len);
    EXPECT_EQ(step % (4 * KiB), 0u) << len;
    EXPECT_GE(step * 7, len) << len;  // seven pieces cover it
  }
}

}  // namespace
}  // namespace gpufile::exec
