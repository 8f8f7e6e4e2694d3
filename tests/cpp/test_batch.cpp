// gpufile::IoBatch: many reads and writes at once, completions by tag, and its errors.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "support.hpp"

namespace cpp_test {
namespace {

using gpufile::BatchCompletion;
using gpufile::BatchOp;
using gpufile::BatchStatus;
using gpufile::errc;
using gpufile::IoOp;

constexpr std::size_t kFileSize = 2 * 1024 * 1024 + 999;

std::map<std::uint64_t, BatchCompletion> by_tag(const std::vector<BatchCompletion>& all) {
  std::map<std::uint64_t, BatchCompletion> out;
  for (const BatchCompletion& c : all) EXPECT_TRUE(out.emplace(c.tag, c).second) << c.tag;
  return out;
}

// Collects completions until `n` arrived (or a wait of 60 s brought none).
std::vector<BatchCompletion> collect(gpufile::IoBatch& batch, std::size_t n) {
  std::vector<BatchCompletion> all;
  while (all.size() < n) {
    auto some = batch.wait(static_cast<unsigned>(n - all.size()), std::chrono::seconds(60));
    if (some.empty()) break;
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

class Batch : public CppApiTest, public ::testing::WithParamInterface<Mem> {};

TEST_P(Batch, ReadsAndWritesPiecesInAnyOrder) {
  const auto bytes = random_bytes(kFileSize, 21);
  const std::string in_path = dir_.file("in"), out_path = dir_.file("out");
  write_file(in_path, bytes);
  write_file(out_path, std::vector<std::uint8_t>(8192, 0));
  gpufile::File in(in_path), out(out_path, "r+");
  Memory mem(GetParam(), kFileSize + 64);

  // Eight reads of uneven pieces at unaligned offsets, in reverse order, each at buf_offset 64
  // plus its file offset; a read past the end; a write of the first 4096 bytes back out at 3.
  std::vector<BatchOp> ops;
  const std::size_t piece = kFileSize / 8 + 1;
  for (std::size_t i = 0; i < 8; ++i) {
    const std::size_t at = (7 - i) * piece;
    const std::size_t len = std::min(piece, kFileSize - at);
    ops.push_back({IoOp::read, &in, mem.get(), len, static_cast<std::int64_t>(at), 64 + at, i});
  }
  gpufile::IoBatch batch(16);
  EXPECT_EQ(batch.capacity(), 16u);
  batch.submit(ops);
  auto done = by_tag(collect(batch, ops.size()));
  ASSERT_EQ(done.size(), ops.size());
  for (const BatchOp& op : ops) {
    const BatchCompletion& c = done.at(op.tag);
    EXPECT_EQ(c.status, BatchStatus::complete) << c.error.message();
    EXPECT_EQ(c.bytes, op.size);
    EXPECT_FALSE(c.error);
  }
  EXPECT_EQ(mismatch(slice(mem.to_host(), 64, kFileSize), bytes), "");

  const std::vector<BatchOp> more = {
      {IoOp::read, &in, mem.get(), 4096, static_cast<std::int64_t>(kFileSize) - 100,
       kFileSize - 4096, 100},  // far from the bytes the write takes
      {IoOp::write, &out, mem.get(), 4096, 3, 64, 101},
      {IoOp::read, &in, mem.get(), 0, 0, 0, 102},  // size 0: completes at once
  };
  batch.submit(more);
  done = by_tag(collect(batch, more.size()));
  ASSERT_EQ(done.size(), more.size());
  EXPECT_EQ(done.at(100).bytes, 100u);  // short at end of file
  EXPECT_EQ(done.at(101).bytes, 4096u);
  EXPECT_EQ(done.at(102).bytes, 0u);
  EXPECT_TRUE(done.at(102).ok());
  auto want = std::vector<std::uint8_t>(8192, 0);
  std::memcpy(want.data() + 3, bytes.data(), 4096);
  EXPECT_EQ(mismatch(read_file(out_path), want), "");
  EXPECT_TRUE(batch.poll().empty());
}

INSTANTIATE_TEST_SUITE_P(Memories, Batch, ::testing::ValuesIn(kAllMem),
                         [](const auto& info) { return std::string(mem_name(info.param)); });

using BatchErrors = CppApiTest;

TEST_F(BatchErrors, ABadOpStartsNothing) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(65536, 22));
  gpufile::File f(path);
  std::vector<char> buf(65536);
  std::vector<BatchOp> ops = {{IoOp::read, &f, buf.data(), 4096, 0, 0, 1},
                              {IoOp::read, &f, buf.data(), 4096, -1, 0, 2}};
  gpufile::IoBatch batch(4);
  EXPECT_GPUFILE_ERROR(batch.submit(ops), errc::invalid_argument);
  ops[1] = {IoOp::write, &f, buf.data(), 4096, 0, 0, 2};  // f is read-only
  EXPECT_GPUFILE_ERROR(batch.submit(ops), errc::invalid_open_flag);
  ops[1] = {IoOp::read, nullptr, buf.data(), 4096, 0, 0, 2};
  EXPECT_GPUFILE_ERROR(batch.submit(ops), errc::invalid_argument);
  EXPECT_TRUE(batch.wait(0, std::chrono::milliseconds(50)).empty()) << "op 1 started";
}

TEST_F(BatchErrors, MoreThanTheCapacityIsRefused) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(65536, 23));
  gpufile::File f(path);
  std::vector<char> buf(65536);
  std::vector<BatchOp> ops;
  for (std::uint64_t i = 0; i < 5; ++i)
    ops.push_back({IoOp::read, &f, buf.data(), 4096, 0, i * 4096, i});
  gpufile::IoBatch batch(4);
  EXPECT_GPUFILE_ERROR(batch.submit(ops), errc::batch_full);
  ops.pop_back();
  batch.submit(ops);
  // Four not yet collected: one more does not fit until they are.
  EXPECT_GPUFILE_ERROR(batch.submit(std::span(ops).first(1)), errc::batch_full);
  EXPECT_EQ(collect(batch, 4).size(), 4u);
  batch.submit(std::span(ops).first(1));
  EXPECT_EQ(collect(batch, 1).size(), 1u);
}

TEST_F(BatchErrors, CapacityOutsideTheSettingIsRefused) {
  EXPECT_GPUFILE_ERROR(gpufile::IoBatch(0), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(gpufile::IoBatch(129), errc::invalid_argument);  // io_batchsize: 128
  gpufile::IoBatch largest(128);
  EXPECT_EQ(largest.capacity(), 128u);
}

TEST_F(BatchErrors, CancelEndsEveryOp) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(kFileSize, 24));
  gpufile::File f(path);
  Memory mem(Mem::device, kFileSize);
  gpufile::IoBatch batch(8);
  std::vector<BatchOp> ops;
  for (std::uint64_t i = 0; i < 8; ++i)
    ops.push_back({IoOp::read, &f, mem.get(), kFileSize / 8, 0, i * (kFileSize / 8), i});
  batch.submit(ops);
  batch.cancel();
  // Every op completed or was canceled; none is lost and none failed.
  const auto all = batch.poll();
  EXPECT_EQ(all.size(), ops.size());
  for (const BatchCompletion& c : all) {
    EXPECT_NE(c.status, BatchStatus::failed) << c.error.message();
    if (c.status == BatchStatus::canceled) {
      EXPECT_EQ(c.error, errc::canceled);
    }
  }
}

}  // namespace
}  // namespace cpp_test
