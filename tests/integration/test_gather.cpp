// Rows gathered out of a file (api::File::start_rows, src/exec/gather.hpp): a rank's columns of
// a tensor, read run by run and packed row after row into memory of every kind. Every byte is
// checked against the file, and so is every byte past what a call reports; bad rows, a file
// that ends inside the rows, a kernel read that fails or is interrupted, a copy that fails, and
// many gathers at once.
#include <fcntl.h>

#include <memory>
#include <string>
#include <vector>

#include "api/file.hpp"
#include "common.hpp"
#include "exec/gather.hpp"
#include "sys/faulty_os.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;
constexpr uint8_t kUntouched = 0x5a;

using gpufile::exec::FileRows;

// What a gather of `rows` must deliver, from the file's bytes (rows past the end cut short).
std::vector<uint8_t> expected(const std::vector<uint8_t>& file, const FileRows& rows) {
  std::vector<uint8_t> out;
  for (uint64_t i = 0; i < rows.rows(); ++i) {
    const uint64_t off = rows.row_offset(i);
    for (uint64_t b = 0; b < rows.run; ++b) {
      if (off + b >= file.size()) return out;
      out.push_back(file[off + b]);
    }
  }
  return out;
}

class Gather : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    Rng rng(test_seed());
    data_ = rng.bytes(kFileSize);
    path_ = dir_.file("tensor.bin");
    write_file(path_, data_.data(), data_.size());
    ASSERT_FALSE(gpufile::api::File::open(path_, O_RDONLY, 0, &file_));
  }
  void TearDown() override {
    file_.reset();
    CapiTest::TearDown();
  }

  // A buffer of `kind` for `rows`, filled with kUntouched; null (and a skip reason) when this
  // kind cannot be had here.
  std::unique_ptr<Buffer> buffer(Mem kind, size_t bytes, std::string* why) {
    auto b = Buffer::make(kind, bytes, why);
    if (b) b->fill(0, bytes, kUntouched);
    return b;
  }

  gpufile::IoResult gather(const Buffer& b, const FileRows& rows) {
    std::unique_ptr<gpufile::api::Future> f;
    if (gpufile::Error e = file_->start_rows(b.ptr(), rows, &f)) return {0, e};
    return f->wait();
  }

  // Gathers `rows` into a buffer of `kind` with room for `slack` bytes more, and checks every
  // byte: those reported against the file, the rest untouched.
  void gather_and_check(Mem kind, const FileRows& rows, size_t slack = 4 * KiB) {
    SCOPED_TRACE(mem_name(kind));
    std::string why;
    auto b = buffer(kind, rows.bytes() + slack, &why);
    if (!b) GTEST_SKIP() << why;
    const std::vector<uint8_t> want = expected(data_, rows);
    const gpufile::IoResult r = gather(*b, rows);
    ASSERT_TRUE(r.ok()) << gpufile::describe(r.error);
    ASSERT_EQ(r.bytes, want.size());
    const std::vector<uint8_t> got = b->read_back(0, b->size());
    EXPECT_EQ(first_mismatch(got.data(), want.data(), want.size()), "");
    EXPECT_EQ(not_filled(got.data() + want.size(), got.size() - want.size(), kUntouched), "");
  }

  static constexpr size_t kFileSize = 24 * MiB + 777;
  TempDir dir_;
  std::string path_;
  std::vector<uint8_t> data_;
  std::unique_ptr<gpufile::api::File> file_;
};

// A bf16 weight of 2048 rows x 5120 columns split four ways along its columns: rank 1's part is
// 2048 runs of 2560 bytes, 10240 bytes apart (5 MiB: more than one staging buffer, so buffers
// are filled again after their copies).
FileRows columns_of_rank_1() { return FileRows{4096 + 2560, 2560, {2048}, {10240}}; }

TEST_F(Gather, ColumnsIntoEveryKindOfMemory) {
  SCOPED_TRACE(test_seed());
  for (Mem kind : kAllMem) gather_and_check(kind, columns_of_rank_1());
}

// Two outer dimensions (a middle dimension split), runs not a multiple of anything, an odd start.
TEST_F(Gather, RowsOfTwoOuterDimensions) {
  SCOPED_TRACE(test_seed());
  const FileRows rows{12345, 333, {7, 300}, {300 * 1000 + 17, 1000}};
  for (Mem kind : kAllMem) gather_and_check(kind, rows);
}

TEST_F(Gather, OneRowAndOneByteRuns) {
  SCOPED_TRACE(test_seed());
  gather_and_check(Mem::device, FileRows{99, 3 * MiB + 5, {}, {}});
  gather_and_check(Mem::device, FileRows{1, 1, {4096}, {3}});
}

// Rows that run past the end of the file: the bytes before it land, the count says how many,
// and nothing past them is written.
TEST_F(Gather, AFileEndingInsideTheRowsGivesTheBytesBeforeItsEnd) {
  SCOPED_TRACE(test_seed());
  const uint64_t stride = 64 * KiB;
  const uint64_t first = kFileSize - 100 * stride - 1000;
  for (Mem kind : {Mem::device, Mem::pageable}) {
    gather_and_check(kind, FileRows{first, 3000, {120}, {stride}});
    gather_and_check(kind, FileRows{kFileSize + 5, 3000, {4}, {stride}});  // none of it there
  }
}

TEST_F(Gather, BadRowsAreRefusedBeforeAnythingIsRead) {
  std::string why;
  auto b = buffer(Mem::pageable, MiB, &why);
  ASSERT_TRUE(b) << why;
  const FileRows bad[] = {
      {0, 0, {4}, {10}},                      // empty run
      {0, 10, {4, 2}, {10}},                  // a stride missing
      {0, 10, {0}, {10}},                     // no rows along a dimension
      {0, 10, {1ull << 40}, {1ull << 40}},    // past the largest file offset
      {1ull << 63, 10, {}, {}},
  };
  for (const FileRows& rows : bad) {
    std::unique_ptr<gpufile::api::Future> f;
    const gpufile::Error e = file_->start_rows(b->ptr(), rows, &f);
    EXPECT_EQ(e.code, gpufile::Errc::invalid_argument) << gpufile::describe(e);
    EXPECT_EQ(f, nullptr);
  }
  EXPECT_EQ(not_filled(b->read_back(0, MiB).data(), MiB, kUntouched), "");
}

// Interrupted kernel reads are made again; a failed one fails the gather with its error, and
// reports no bytes.
TEST_F(Gather, KernelReadFaults) {
  SCOPED_TRACE(test_seed());
  gpufile::sys::FaultyOs faults;
  gpufile::sys::ScopedOs use(faults);
  faults.add({.op = gpufile::sys::FaultOp::pread, .path = "tensor.bin", .nth = 5, .times = 3,
              .err = EINTR});
  faults.add({.op = gpufile::sys::FaultOp::pread, .path = "tensor.bin", .nth = 50,
              .action = gpufile::sys::FaultAction::short_io, .limit = 100});
  gather_and_check(Mem::device, columns_of_rank_1());

  faults.add({.op = gpufile::sys::FaultOp::pread, .path = "tensor.bin", .nth = 1, .err = EIO});
  std::string why;
  auto b = buffer(Mem::device, columns_of_rank_1().bytes(), &why);
  if (!b) GTEST_SKIP() << why;
  const gpufile::IoResult r = gather(*b, columns_of_rank_1());
  EXPECT_EQ(r.error.code, gpufile::Errc::system);
  EXPECT_EQ(r.error.sys_errno, EIO);
  EXPECT_EQ(r.bytes, 0u);
}

// A copy to the GPU that fails fails the gather; the copies queued before it have ended when
// the Future is done (the buffer is not written after).
TEST_F(Gather, AFailedCopyFailsTheGather) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  if (fake.fail_call == nullptr) GTEST_SKIP() << "needs the driver test double's fault controls";
  AtExit reset([&] {
    fake.reset_faults();
    fake.set_async_delay_us(0);
  });
  std::string why;
  auto b = buffer(Mem::device, columns_of_rank_1().bytes(), &why);
  ASSERT_TRUE(b) << why;
  fake.set_async_delay_us(2000);
  ASSERT_EQ(fake.fail_call("cuMemcpyHtoDAsync", 2, 1), 0);  // CUDA_ERROR_INVALID_VALUE
  const gpufile::IoResult r = gather(*b, columns_of_rank_1());
  EXPECT_EQ(r.error.code, gpufile::Errc::cuda) << gpufile::describe(r.error);
  EXPECT_EQ(r.bytes, 0u);
  const std::vector<uint8_t> once = b->read_back(0, b->size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(first_mismatch(b->read_back(0, b->size()).data(), once.data(), once.size()), "")
      << "the buffer changed after the gather reported";
}

// Sixteen gathers at once (what a loader keeps in flight), each rank's part of its own tensor.
TEST_F(Gather, ManyAtOnce) {
  SCOPED_TRACE(test_seed());
  CAPI_REQUIRE_DRIVER();
  Watchdog dog(std::chrono::seconds(120), "Gather.ManyAtOnce");
  constexpr unsigned kAtOnce = 16;
  const uint64_t tensor = kFileSize / kAtOnce;
  std::vector<FileRows> parts;
  for (unsigned i = 0; i < kAtOnce; ++i)
    parts.push_back(FileRows{i * tensor + (i % 4) * 1000, 1000, {tensor / 4000}, {4000}});
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<std::unique_ptr<gpufile::api::Future>> futures(kAtOnce);
  for (unsigned i = 0; i < kAtOnce; ++i) {
    std::string why;
    bufs.push_back(buffer(Mem::device, parts[i].bytes(), &why));
    ASSERT_TRUE(bufs.back()) << why;
    ASSERT_FALSE(file_->start_rows(bufs[i]->ptr(), parts[i], &futures[i]));
  }
  for (unsigned i = 0; i < kAtOnce; ++i) {
    const gpufile::IoResult r = futures[i]->wait();
    ASSERT_TRUE(r.ok()) << gpufile::describe(r.error);
    ASSERT_EQ(r.bytes, parts[i].bytes());
    const std::vector<uint8_t> want = expected(data_, parts[i]);
    EXPECT_EQ(first_mismatch(bufs[i]->read_back(0, want.size()).data(), want.data(), want.size()), "")
        << "part " << i;
  }
}

TEST_F(Gather, CachedSaysWhetherThePageCacheHoldsTheRange) {
  const std::optional<bool> all = file_->cached(0, kFileSize);
  if (!all) GTEST_SKIP() << "the kernel has no cachestat";
  EXPECT_TRUE(*all) << "a file just written is cached";
  const int fd = ::open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
  EXPECT_EQ(file_->cached(0, kFileSize), std::optional<bool>(false));
}

}  // namespace
}  // namespace capi_test
