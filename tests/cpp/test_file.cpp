// gpufile::File, gpufile::Future and gpufile::RegisteredBuffer: RAII, data at unaligned offsets
// in every kind of memory, futures, registration, and the documented error of each misuse.
#include <cuda_runtime.h>
#include <fakecuda.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "support.hpp"

namespace cpp_test {
namespace {

using gpufile::errc;

constexpr std::size_t kFileSize = 3 * 1024 * 1024 + 4321;  // past the small-IO threshold

bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// ---- RAII ------------------------------------------------------------------------------------

using FileRaii = CppApiTest;

TEST_F(FileRaii, OpensRegistersAndClosesWithItsScope) {
  const std::string path = dir_.file("a");
  int fd = -1;
  {
    gpufile::File f(path, "w+");
    EXPECT_FALSE(f.closed());
    EXPECT_EQ(f.path(), path);
    EXPECT_TRUE(f.readable());
    EXPECT_TRUE(f.writable());
    EXPECT_NE(f.handle(), nullptr);
    fd = f.fd();
    EXPECT_TRUE(fd_is_open(fd));
    EXPECT_TRUE(gpufile::is_driver_open());  // the first File opens the driver
    EXPECT_EQ(f.size(), 0u);
  }
  EXPECT_FALSE(fd_is_open(fd));
}

TEST_F(FileRaii, CloseIsIdempotentAndLaterUseSaysClosed) {
  gpufile::File f(dir_.file("a"), "w");
  const int fd = f.fd();
  f.close();
  EXPECT_TRUE(f.closed());
  EXPECT_FALSE(f.readable());
  EXPECT_FALSE(fd_is_open(fd));
  f.close();  // nothing left to do
  char byte = 0;
  EXPECT_GPUFILE_ERROR(f.write(&byte, 1, 0), std::errc::bad_file_descriptor);
  EXPECT_GPUFILE_ERROR(f.fd(), std::errc::bad_file_descriptor);
  EXPECT_GPUFILE_ERROR(f.pwrite(&byte, 1, 0), std::errc::bad_file_descriptor);
}

TEST_F(FileRaii, MovesOwnership) {
  gpufile::File a(dir_.file("a"), "w");
  const int fd_a = a.fd();
  gpufile::File b(std::move(a));
  EXPECT_TRUE(a.closed());  // NOLINT(bugprone-use-after-move): moved-from is closed, by design
  EXPECT_EQ(b.fd(), fd_a);
  gpufile::File c(dir_.file("c"), "w");
  const int fd_c = c.fd();
  c = std::move(b);  // closes what c held
  EXPECT_FALSE(fd_is_open(fd_c));
  EXPECT_EQ(c.fd(), fd_a);
  EXPECT_TRUE(gpufile::File().closed());
}

// ---- data ------------------------------------------------------------------------------------

class FileData : public CppApiTest, public ::testing::WithParamInterface<Mem> {};

TEST_P(FileData, ReadsUnalignedRangesIntoUnalignedPlaces) {
  const auto bytes = random_bytes(kFileSize, 1);
  const std::string path = dir_.file("data");
  write_file(path, bytes);
  gpufile::File f(path);
  ASSERT_EQ(f.size(), kFileSize);

  Memory mem(GetParam(), 2 * 1024 * 1024);
  const std::size_t buf_offset = 7, size = 1024 * 1024 + 333;
  const std::int64_t file_offset = 4097;
  ASSERT_EQ(f.read(mem.get(), size, file_offset, buf_offset), size);
  const auto got = mem.to_host();
  EXPECT_EQ(mismatch(slice(got, buf_offset, size), slice(bytes, file_offset, size)), "");
  // Nothing outside the range was touched.
  EXPECT_EQ(mismatch(slice(got, 0, buf_offset), std::vector<std::uint8_t>(buf_offset, 0xee)), "");
  const std::size_t after = buf_offset + size;
  EXPECT_EQ(mismatch(slice(got, after, got.size() - after),
                     std::vector<std::uint8_t>(got.size() - after, 0xee)), "");
}

TEST_P(FileData, ReadsShortOnlyAtEndOfFile) {
  const auto bytes = random_bytes(kFileSize, 2);
  const std::string path = dir_.file("data");
  write_file(path, bytes);
  gpufile::File f(path);
  Memory mem(GetParam(), 1024 * 1024);
  const std::int64_t from = kFileSize - 1000;
  EXPECT_EQ(f.read(mem.get(), mem.size(), from), 1000u);
  EXPECT_EQ(mismatch(slice(mem.to_host(), 0, 1000), slice(bytes, from, 1000)), "");
  EXPECT_EQ(f.read(mem.get(), mem.size(), kFileSize), 0u);
  EXPECT_EQ(f.read(mem.get(), mem.size(), kFileSize + 5), 0u);
}

TEST_P(FileData, WritesUnalignedRangesAndKeepsTheirNeighbours) {
  const auto before = random_bytes(kFileSize, 3);
  const std::string path = dir_.file("data");
  write_file(path, before);
  const std::size_t buf_offset = 13, size = 1024 * 1024 + 77;
  const std::int64_t file_offset = 511;
  const auto fresh = random_bytes(buf_offset + size, 4);
  Memory mem(GetParam(), fresh.size());
  mem.from_host(fresh);
  {
    gpufile::File f(path, "r+");
    ASSERT_EQ(f.write(mem.get(), size, file_offset, buf_offset), size);
  }
  auto want = before;
  std::memcpy(want.data() + file_offset, fresh.data() + buf_offset, size);
  EXPECT_EQ(mismatch(read_file(path), want), "");
}

TEST_P(FileData, WritesPastTheEndGrowTheFile) {
  const std::string path = dir_.file("new");
  const auto fresh = random_bytes(200000, 5);
  Memory mem(GetParam(), fresh.size());
  mem.from_host(fresh);
  gpufile::File f(path, "w+");
  ASSERT_EQ(f.write(mem.get(), fresh.size(), 100), fresh.size());
  EXPECT_EQ(f.size(), 100 + fresh.size());
  std::vector<std::uint8_t> want(100 + fresh.size(), 0);
  std::memcpy(want.data() + 100, fresh.data(), fresh.size());
  EXPECT_EQ(mismatch(read_file(path), want), "");
}

// ---- futures ---------------------------------------------------------------------------------

TEST_P(FileData, FuturesReadAndWriteConcurrently) {
  const auto bytes = random_bytes(kFileSize, 6);
  const std::string path = dir_.file("data");
  write_file(path, bytes);
  gpufile::File f(path, "r+");
  Memory mem(GetParam(), kFileSize);
  const std::size_t half = kFileSize / 2 + 3;
  gpufile::Future first = f.pread(mem.get(), half, 0);
  gpufile::Future second = f.pread(mem.get(), kFileSize - half, half, half);
  EXPECT_TRUE(first.valid());
  EXPECT_TRUE(second.wait_for(std::chrono::seconds(60)));
  EXPECT_TRUE(second.done());
  EXPECT_EQ(first.get(), half);
  EXPECT_EQ(second.get(), kFileSize - half);
  EXPECT_EQ(second.get(), kFileSize - half);  // again: the same result
  EXPECT_EQ(mismatch(mem.to_host(), bytes), "");

  // Back into the file, shifted by one byte, from the same memory.
  gpufile::Future write = f.pwrite(mem.get(), 4096, 1);
  write.wait();
  EXPECT_EQ(write.get(), 4096u);
  auto want = bytes;
  std::memcpy(want.data() + 1, bytes.data(), 4096);
  EXPECT_EQ(mismatch(read_file(path), want), "");
}

// One File, many threads: each reads its own stripes (documented: IO calls on one File are
// independent).
TEST_P(FileData, ManyThreadsShareOneFile) {
  const auto bytes = random_bytes(kFileSize, 16);
  const std::string path = dir_.file("data");
  write_file(path, bytes);
  gpufile::File f(path);
  Memory mem(GetParam(), kFileSize);
  constexpr std::size_t kThreads = 8, kStripe = 100003;
  std::vector<std::thread> threads;
  std::vector<std::size_t> moved(kThreads, 0);
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t at = t * kStripe; at < kFileSize; at += kThreads * kStripe) {
        const std::size_t n = std::min(kStripe, kFileSize - at);
        moved[t] += f.read(mem.get(), n, static_cast<std::int64_t>(at), at);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::size_t total = 0;
  for (std::size_t n : moved) total += n;
  EXPECT_EQ(total, kFileSize);
  EXPECT_EQ(mismatch(mem.to_host(), bytes), "");
}

// ---- rows ------------------------------------------------------------------------------------

// What pread_rows must deliver: each row's run in C order, cut where the file ends.
std::vector<std::uint8_t> rows_of(const std::vector<std::uint8_t>& file,
                                  const gpufile::FileRows& r) {
  std::vector<std::uint64_t> index(r.counts.size(), 0);
  std::vector<std::uint8_t> out;
  for (;;) {
    std::uint64_t at = r.first;
    for (std::size_t k = 0; k < index.size(); ++k) at += index[k] * r.strides[k];
    for (std::uint64_t b = 0; b < r.run; ++b) {
      if (at + b >= file.size()) return out;
      out.push_back(file[at + b]);
    }
    std::size_t k = index.size();
    while (k > 0 && ++index[k - 1] == r.counts[k - 1]) index[--k] = 0;
    if (k == 0) return out;
  }
}

// Rank 2 of 4 of a bf16 weight of 300 rows x 2000 columns at offset 4100: 300 runs of 1000
// bytes, 4000 apart; then two outer dimensions (3 x 50 rows of 777 bytes), every byte checked
// and the bytes after the part untouched.
TEST_P(FileData, ReadsRowsPackedRowAfterRow) {
  const auto bytes = random_bytes(kFileSize, 21);
  const std::string path = dir_.file("weights");
  write_file(path, bytes);
  gpufile::File f(path);
  for (const gpufile::FileRows& rows : {gpufile::FileRows{4100 + 2 * 1000, 1000, {300}, {4000}},
                                        gpufile::FileRows{9, 777, {3, 50}, {500000, 9000}}}) {
    const std::vector<std::uint8_t> want = rows_of(bytes, rows);
    Memory mem(GetParam(), want.size() + 4096);
    gpufile::Future read = f.pread_rows(mem.get(), rows);
    EXPECT_EQ(read.get(), want.size());
    const auto got = mem.to_host();
    EXPECT_EQ(mismatch(slice(got, 0, want.size()), want), "");
    EXPECT_EQ(mismatch(slice(got, want.size(), 4096), std::vector<std::uint8_t>(4096, 0xee)), "");
  }
}

// Rows past the end of the file: the bytes before its end, contiguous from the start.
TEST_P(FileData, RowsPastTheEndAreShort) {
  const auto bytes = random_bytes(kFileSize, 22);
  const std::string path = dir_.file("weights");
  write_file(path, bytes);
  gpufile::File f(path);
  const gpufile::FileRows rows{kFileSize - 10 * 5000 + 100, 2000, {20}, {5000}};
  const std::vector<std::uint8_t> want = rows_of(bytes, rows);
  ASSERT_LT(want.size(), 20u * 2000u);
  Memory mem(GetParam(), 20 * 2000);
  EXPECT_EQ(f.pread_rows(mem.get(), rows).get(), want.size());
  EXPECT_EQ(mismatch(slice(mem.to_host(), 0, want.size()), want), "");
}

INSTANTIATE_TEST_SUITE_P(Memories, FileData, ::testing::ValuesIn(kAllMem),
                         [](const auto& info) { return std::string(mem_name(info.param)); });

// The double's copies take 20 ms each, so a read of kFileSize into device memory is still
// running right after it started. Its bytes count under their data path only when the whole IO
// finished, which tells from outside whether a call waited for it (the data alone cannot: a
// later copy back waits for the copies before it). The knobs are reset after each test, even
// one that failed half-way.
class FutureLifetime : public CppApiTest {
 protected:
  void SetUp() override {
    CppApiTest::SetUp();
    write_file(path_, bytes_);
    file_ = gpufile::File(path_);
    gpufile::reset_statistics();
    fakecuda_set_async_delay_us(20000);
  }
  void TearDown() override {
    fakecuda_set_async_delay_us(0);
    fakecuda_reset_faults();
    file_.close();
    CppApiTest::TearDown();
  }
  static std::uint64_t bytes_read_so_far() {
    const gpufile::OpStats read = gpufile::statistics().read;
    return read.staged_direct.bytes + read.page_cache.bytes + read.host_direct.bytes +
           read.small_io.bytes;
  }
  // The memory holds the file.
  void expect_file_in(const Memory& mem) {
    fakecuda_set_async_delay_us(0);
    EXPECT_EQ(mismatch(mem.to_host(), bytes_), "");
  }

  const std::vector<std::uint8_t> bytes_ = random_bytes(kFileSize, 7);
  const std::string path_ = dir_.file("data");
  gpufile::File file_;
  Memory mem_{Mem::device, kFileSize};
};

TEST_F(FutureLifetime, DestroyingARunningFutureWaitsForIt) {
  {
    gpufile::Future running = file_.pread(mem_.get(), kFileSize, 0);
    ASSERT_FALSE(running.done()) << "the read finished at once: nothing would be tested";
  }
  EXPECT_EQ(bytes_read_so_far(), kFileSize);
  expect_file_in(mem_);
}

TEST_F(FutureLifetime, AssigningOverARunningFutureWaitsForIt) {
  gpufile::Future future = file_.pread(mem_.get(), kFileSize, 0);
  ASSERT_FALSE(future.done());
  future = gpufile::Future();
  EXPECT_EQ(bytes_read_so_far(), kFileSize);
  EXPECT_FALSE(future.valid());
  expect_file_in(mem_);
}

TEST_F(FutureLifetime, ClosingTheFileWaitsForItsFutures) {
  gpufile::Future running = file_.pread(mem_.get(), kFileSize, 0);
  ASSERT_FALSE(running.done());
  file_.close();
  // The IO is over once close() returned. (The Future itself may turn done a moment later: its
  // completion gives the file back before it wakes the waiters.)
  EXPECT_EQ(bytes_read_so_far(), kFileSize);
  EXPECT_EQ(running.get(), kFileSize);
  expect_file_in(mem_);
}

TEST_F(FutureLifetime, GetWaitsAndWaitForTimesOut) {
  gpufile::Future running = file_.pread(mem_.get(), kFileSize, 0);
  EXPECT_FALSE(running.wait_for(std::chrono::milliseconds(1)));
  EXPECT_EQ(running.get(), kFileSize);
  EXPECT_TRUE(running.done());
  EXPECT_TRUE(running.wait_for(std::chrono::milliseconds(0)));
  expect_file_in(mem_);
}

TEST_F(FutureLifetime, AnEmptyFutureSaysSo) {
  gpufile::Future empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_GPUFILE_ERROR(empty.get(), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(empty.wait(), errc::invalid_argument);
}

TEST_F(FutureLifetime, AFailedIoThrowsFromGet) {
  // Every way the workers copy to the GPU fails with CUDA_ERROR_UNKNOWN (999).
  for (const char* copy : {"cuMemcpyHtoDAsync_v2", "cuMemcpyBatchAsync_v2", "cuMemcpyHtoD_v2"})
    ASSERT_EQ(fakecuda_fail_call_from(copy, 1, 999), 0) << copy;
  gpufile::Future failing = file_.pread(mem_.get(), 4096, 0);
  try {
    failing.get();
    ADD_FAILURE() << "the read succeeded although every copy failed";
  } catch (const gpufile::Exception& e) {
    EXPECT_EQ(e.code(), errc::cuda) << e.what();
    EXPECT_EQ(e.cuda_result(), 999);
  }
}

// ---- IO ordered on a CUDA stream ------------------------------------------------------------

class StreamIo : public CppApiTest, public ::testing::WithParamInterface<Mem> {
 protected:
  void SetUp() override {
    CppApiTest::SetUp();
    write_file(path_, bytes_);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    fakecuda_set_async_delay_us(0);
    fakecuda_reset_faults();
    cudaStreamDestroy(stream_);
    CppApiTest::TearDown();
  }
  // Holds the stream up: the double's copies take `delay_us` each, and one is queued on the
  // stream ahead of what the test queues next.
  void hold_stream(const Memory& mem, unsigned delay_us) {
    fakecuda_set_async_delay_us(delay_us);
    ASSERT_EQ(cudaMemcpyAsync(mem.get(), ahead_.data(), ahead_.size(), cudaMemcpyDefault, stream_),
              cudaSuccess);
  }
  const std::vector<std::uint8_t> ahead_ = std::vector<std::uint8_t>(4096, 1);
  const std::vector<std::uint8_t> bytes_ = random_bytes(kFileSize, 21);
  const std::string path_ = dir_.file("data");
  cudaStream_t stream_ = nullptr;
};

TEST_P(StreamIo, ReadsAndWritesInStreamOrderAtOffsets) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_, "r+");
  gpufile::StreamFuture read = f.read_async(mem.get(), kFileSize - 1000, 777, 100, stream_);
  EXPECT_TRUE(read.valid());
  EXPECT_EQ(read.get(), kFileSize - 1000);
  EXPECT_TRUE(read.done());
  EXPECT_EQ(read.get(), kFileSize - 1000);  // again: the same result
  const std::vector<std::uint8_t> got = mem.to_host();
  EXPECT_EQ(mismatch(slice(got, 100, kFileSize - 1000), slice(bytes_, 777, kFileSize - 1000)), "");
  EXPECT_EQ(mismatch(slice(got, 0, 100), std::vector<std::uint8_t>(100, 0xee)), "");

  // Written back behind the read on the same stream: the write takes what the read brought.
  gpufile::File out(dir_.file("out"), "w");
  gpufile::StreamFuture write = out.write_async(mem.get(), 5000, 3, 100, stream_);
  EXPECT_EQ(write.get(), 5000u);
  const std::vector<std::uint8_t> file = read_file(dir_.file("out"));
  ASSERT_EQ(file.size(), 5003u);
  EXPECT_EQ(mismatch(slice(file, 3, 5000), slice(bytes_, 777, 5000)), "");
}

TEST_P(StreamIo, TheLegacyDefaultStreamIsNull) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_);
  EXPECT_EQ(f.read_async(mem.get(), kFileSize).get(), kFileSize);
  EXPECT_EQ(mismatch(mem.to_host(), bytes_), "");
}

TEST_P(StreamIo, AReadPastTheEndIsShort) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_);
  EXPECT_EQ(f.read_async(mem.get(), 8192, kFileSize - 100, 0, stream_).get(), 100u);
  EXPECT_EQ(mismatch(slice(mem.to_host(), 0, 100), slice(bytes_, kFileSize - 100, 100)), "");
}

// The stream reads the op's parameters when it gets there, and they live in the StreamFuture:
// destroying one whose op is still queued must wait for the stream (the double's copies take
// 20 ms each here). Under ASan a StreamFuture that did not wait is a use after free.
TEST_P(StreamIo, DestroyingAQueuedStreamFutureWaitsForTheStream) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_);
  gpufile::reset_statistics();
  ASSERT_NO_FATAL_FAILURE(hold_stream(mem, 20000));
  {
    gpufile::StreamFuture queued = f.read_async(mem.get(), kFileSize, 0, 0, stream_);
    ASSERT_FALSE(queued.done()) << "the stream passed the op at once: nothing would be tested";
  }
  const gpufile::OpStats read = gpufile::statistics().read;
  EXPECT_EQ(read.staged_direct.bytes + read.page_cache.bytes + read.host_direct.bytes +
                read.small_io.bytes,
            kFileSize)
      << "the op had not run when its StreamFuture was let go";
  fakecuda_set_async_delay_us(0);
  EXPECT_EQ(mismatch(mem.to_host(), bytes_), "");
}

// A failure met when the stream gets to the op comes from get(): here the file was closed
// while the op waited behind 200 ms of other work on its stream (room for a slow close).
TEST_P(StreamIo, AFailureAtExecutionThrowsFromGet) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_);
  ASSERT_NO_FATAL_FAILURE(hold_stream(mem, 200000));
  gpufile::StreamFuture queued = f.read_async(mem.get(), kFileSize, 0, 0, stream_);
  ASSERT_FALSE(queued.done()) << "the stream passed the op at once: nothing would be tested";
  f.close();
  EXPECT_GPUFILE_ERROR(queued.get(), errc::handle_not_registered);
  EXPECT_TRUE(queued.done());
}

// When the op cannot be marked on its stream, the call waits for the stream before it throws:
// nothing of the op is still queued once the caller learns it failed.
TEST_P(StreamIo, AMarkThatCannotBeRecordedWaitsForTheStream) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_);
  gpufile::reset_statistics();
  fakecuda_set_async_delay_us(20000);
  ASSERT_EQ(fakecuda_fail_call("cuEventRecord", 1, 999), 0);
  try {
    f.read_async(mem.get(), kFileSize, 0, 0, stream_);
    ADD_FAILURE() << "read_async succeeded although its mark could not be recorded";
  } catch (const gpufile::Exception& e) {
    EXPECT_EQ(e.code(), errc::cuda) << e.what();
    EXPECT_EQ(e.cuda_result(), 999);
  }
  const gpufile::OpStats read = gpufile::statistics().read;
  EXPECT_EQ(read.staged_direct.bytes + read.page_cache.bytes + read.host_direct.bytes +
                read.small_io.bytes,
            kFileSize);
  fakecuda_set_async_delay_us(0);
  EXPECT_EQ(mismatch(mem.to_host(), bytes_), "");
}

TEST_P(StreamIo, BadArgumentsThrowAtOnce) {
  Memory mem(GetParam(), kFileSize);
  gpufile::File f(path_);
  EXPECT_GPUFILE_ERROR(f.read_async(mem.get(), 10, -1, 0, stream_), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.read_async(nullptr, 10, 0, 0, stream_), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.write_async(mem.get(), 10, 0, 0, stream_), errc::invalid_open_flag);
  f.close();
  EXPECT_GPUFILE_ERROR(f.read_async(mem.get(), 10, 0, 0, stream_), std::errc::bad_file_descriptor);
  gpufile::StreamFuture empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_GPUFILE_ERROR(empty.get(), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(empty.done(), errc::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Memories, StreamIo, ::testing::ValuesIn(kAllMem),
                         [](const auto& info) { return std::string(mem_name(info.param)); });

// ---- buffer registration -----------------------------------------------------------------------

using Registration = CppApiTest;

TEST_F(Registration, ReadsThroughARegisteredBufferAtAnOffset) {
  const auto bytes = random_bytes(kFileSize, 10);
  const std::string path = dir_.file("data");
  write_file(path, bytes);
  gpufile::File f(path);
  Memory mem(Mem::device, kFileSize + 100);
  gpufile::RegisteredBuffer reg(mem.get(), mem.size());
  EXPECT_TRUE(reg.registered());
  EXPECT_EQ(reg.base(), mem.get());
  EXPECT_EQ(f.read(mem.get(), kFileSize, 0, 100), kFileSize);
  EXPECT_EQ(mismatch(slice(mem.to_host(), 100, kFileSize), bytes), "");
  // The registration bounds the IO: one byte past its end is refused.
  EXPECT_GPUFILE_ERROR(f.read(mem.get(), kFileSize, 0, 101), errc::mapping_range);
  EXPECT_GPUFILE_ERROR(gpufile::RegisteredBuffer(mem.get(), 16), errc::buffer_already_registered);
}

TEST_F(Registration, EndsWithItsScopeAndMoves) {
  Memory mem(Mem::device, 65536);
  {
    gpufile::RegisteredBuffer reg(mem.get(), mem.size());
    gpufile::RegisteredBuffer moved(std::move(reg));
    EXPECT_FALSE(reg.registered());  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(moved.registered());
  }
  gpufile::RegisteredBuffer again(mem.get(), mem.size());  // the first was deregistered
  again.deregister();
  EXPECT_FALSE(again.registered());
  gpufile::RegisteredBuffer once_more(mem.get(), mem.size());
  gpufile::driver_close();  // forgets the registration: its destructor must not mind
}

TEST_F(Registration, RefusesARangePastItsAllocation) {
  Memory mem(Mem::device, 65536);
  EXPECT_GPUFILE_ERROR(gpufile::RegisteredBuffer(mem.get(), 65537), errc::pointer_range);
  EXPECT_GPUFILE_ERROR(gpufile::RegisteredBuffer(nullptr, 16), errc::invalid_argument);
}

// ---- errors ----------------------------------------------------------------------------------

using FileErrors = CppApiTest;

TEST_F(FileErrors, AMissingFileIsAnOsError) {
  const std::string path = dir_.file("missing");
  try {
    gpufile::File f(path);
    ADD_FAILURE() << "opened a file that does not exist";
  } catch (const std::system_error& e) {  // gpufile::Exception is one
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  gpufile::File created(dir_.file("new"), "x");
  EXPECT_GPUFILE_ERROR(gpufile::File(dir_.file("new"), "x"), std::errc::file_exists);
}

TEST_F(FileErrors, AppendingAndUnknownModesAreRefused) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(10, 11));
  EXPECT_GPUFILE_ERROR(gpufile::File(path, O_WRONLY | O_APPEND), errc::invalid_open_flag);
  EXPECT_GPUFILE_ERROR(gpufile::File(path, "rw"), errc::invalid_argument);
  gpufile::File a(path, "a");  // "a" keeps the contents and writes where its offset says
  char byte = 'x';
  EXPECT_EQ(a.write(&byte, 1, 0), 1u);
  EXPECT_EQ(read_file(path).size(), 10u);
  EXPECT_EQ(read_file(path)[0], 'x');
}

TEST_F(FileErrors, IoTheModeDoesNotAllowIsRefused) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(4096, 12));
  char buf[16] = {};
  gpufile::File read_only(path, "r");
  EXPECT_GPUFILE_ERROR(read_only.write(buf, 16, 0), errc::invalid_open_flag);
  EXPECT_GPUFILE_ERROR(read_only.pwrite(buf, 16, 0), errc::invalid_open_flag);
  gpufile::File write_only(path, "a");
  EXPECT_GPUFILE_ERROR(write_only.read(buf, 16, 0), errc::invalid_open_flag);
  EXPECT_GPUFILE_ERROR(write_only.pread(buf, 16, 0), errc::invalid_open_flag);
}

TEST_F(FileErrors, BadOffsetsAndPointersAreInvalidArguments) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(4096, 13));
  gpufile::File f(path, "r+");
  char buf[16] = {};
  EXPECT_GPUFILE_ERROR(f.read(buf, 16, -1), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.write(buf, 16, -4096), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.pread(buf, 16, -1), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.read(nullptr, 16, 0), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.read(buf, 16, INT64_MAX), errc::invalid_argument);  // offset + size
  EXPECT_GPUFILE_ERROR(f.read(buf, 16, 0, SIZE_MAX), errc::invalid_argument);
  Memory mem(Mem::device, 4096);
  EXPECT_GPUFILE_ERROR(f.read(mem.get(), 4096, 0, 1), errc::pointer_range);
}

TEST_F(FileErrors, BadRowsAreInvalidArgumentsAndStartNothing) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(4096, 23));
  gpufile::File f(path, "r+");
  char buf[64];
  std::memset(buf, 0x11, sizeof buf);
  EXPECT_GPUFILE_ERROR(f.pread_rows(buf, {0, 0, {4}, {16}}), errc::invalid_argument);    // no run
  EXPECT_GPUFILE_ERROR(f.pread_rows(buf, {0, 16, {4}, {}}), errc::invalid_argument);     // no stride
  EXPECT_GPUFILE_ERROR(f.pread_rows(buf, {0, 16, {0}, {16}}), errc::invalid_argument);   // no row
  EXPECT_GPUFILE_ERROR(f.pread_rows(buf, {0, 16, {1ull << 40, 1ull << 40}, {16, 16}}),  // 2^84 bytes
                       errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.pread_rows(buf, {1ull << 62, 16, {3}, {1ull << 61}}),            // past 2^63
                       errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(f.pread_rows(nullptr, {0, 16, {4}, {16}}), errc::invalid_argument);
  EXPECT_EQ(mismatch(std::vector<std::uint8_t>(buf, buf + sizeof buf),
                     std::vector<std::uint8_t>(sizeof buf, 0x11)), "");
  gpufile::File write_only(dir_.file("w"), "w");
  EXPECT_GPUFILE_ERROR(write_only.pread_rows(buf, {0, 16, {4}, {16}}), errc::invalid_open_flag);
}

TEST_F(FileErrors, IoAfterTheDriverClosedSaysTheRegistrationIsGone) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(4096, 14));
  gpufile::File f(path);
  gpufile::driver_close();
  char buf[16] = {};
  EXPECT_GPUFILE_ERROR(f.read(buf, 16, 0), errc::handle_not_registered);
  f.close();  // still closes its descriptor without complaint
}

}  // namespace
}  // namespace cpp_test
