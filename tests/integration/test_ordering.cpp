// Suite 6: a synchronous cuFileRead / cuFileWrite (or a batch entry) of GPU memory comes after the work its caller
// queued on the legacy default stream before the call, as cudaMemcpy does. CUDA lets a
// cuMemsetD8 of device memory (or a cuMemcpyHtoD from pageable memory) return before its bytes
// land; a write of that memory right after must write the new bytes, and a read's bytes must not
// be overwritten by the older memset afterwards.
//
// Method: a host function holds the legacy stream (StreamGate) while a memset is queued behind
// it and the IO call starts; another thread opens the gate 100 ms later. Without the ordering
// the IO moves its bytes while the memset still waits: the write stores the old bytes, the read
// loses its bytes to the memset. Deterministic on the test double and on a real GPU alike.
#include "common.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;
constexpr uint8_t kOld = 0x11, kQueued = 0x5a;

using MemsetD8 = cu::CUresult (*)(cu::CUdeviceptr, unsigned char, size_t);

class LegacyOrder : public CapiTest, public ::testing::WithParamInterface<size_t> {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    CAPI_REQUIRE_DRIVER();
    memset_ = reinterpret_cast<MemsetD8>(driver_symbol("cuMemsetD8_v2"));
    if (memset_ == nullptr) GTEST_SKIP() << "the driver has no cuMemsetD8_v2";
    session_ = std::make_unique<DriverSession>();
    ASSERT_TRUE(session_->ok()) << session_->error();
    Rng rng(test_seed());
    data_ = rng.bytes(size());
    path_ = dir_.file("order.bin");
    ASSERT_NO_FATAL_FAILURE(write_file(path_, data_.data(), size()));
    h_ = Handle(path_, O_RDWR);
    ASSERT_TRUE(h_.ok());
    std::string why;
    buf_ = Buffer::make(Mem::device, size(), &why);
    ASSERT_TRUE(buf_) << why;
    buf_->fill(0, size(), kOld);
  }
  void TearDown() override {
    if (drv()) drv()->StreamSynchronize(nullptr);
    buf_.reset();
    h_.reset();
    session_.reset();
    CapiTest::TearDown();
  }
  size_t size() const { return GetParam(); }
  cu::CUdeviceptr dev() const { return reinterpret_cast<cu::CUdeviceptr>(buf_->ptr()); }

  // Runs `io` while a memset of the whole buffer to kQueued waits on the legacy stream behind a
  // gate that opens 100 ms later; returns what `io` returned.
  template <typename Io>
  ssize_t behind_queued_memset(Io io) {
    Watchdog dog(std::chrono::seconds(60), "LegacyOrder");
    StreamGate gate;
    EXPECT_EQ(gate.enqueue(nullptr), cu::CUDA_SUCCESS);
    EXPECT_EQ(memset_(dev(), kQueued, size()), cu::CUDA_SUCCESS);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.release();
    });
    ssize_t n = io();
    opener.join();
    return n;
  }

  MemsetD8 memset_ = nullptr;
  TempDir dir_;
  std::string path_;
  std::vector<uint8_t> data_;
  std::unique_ptr<DriverSession> session_;
  Handle h_;
  std::unique_ptr<Buffer> buf_;
};

TEST_P(LegacyOrder, AWriteStoresWhatAMemsetQueuedBeforeItWrote) {
  ssize_t n = behind_queued_memset([&] { return cuFileWrite(h_.get(), buf_->ptr(), size(), 0, 0); });
  ASSERT_EQ(n, static_cast<ssize_t>(size()));
  std::vector<uint8_t> file = read_file(path_, 0, size());
  EXPECT_EQ(not_filled(file.data(), size(), kQueued), "")
      << "the write stored bytes from before the memset queued ahead of it";
}

TEST_P(LegacyOrder, AReadIsNotOverwrittenByAMemsetQueuedBeforeIt) {
  ssize_t n = behind_queued_memset([&] { return cuFileRead(h_.get(), buf_->ptr(), size(), 0, 0); });
  ASSERT_EQ(n, static_cast<ssize_t>(size()));
  ASSERT_EQ(drv()->StreamSynchronize(nullptr), cu::CUDA_SUCCESS);
  std::vector<uint8_t> got = buf_->read_back(0, size());
  EXPECT_EQ(first_mismatch(got.data(), data_.data(), size()), "")
      << "the memset queued before the read landed on top of it";
}

// The same for a batch entry: its copies come after what the legacy stream had queued when it
// was submitted (found by the GPU soak: a batch write of device memory filled by a pageable
// cuMemcpyHtoD stored older bytes while the GPU was busy).
// A batch of one entry, submitted; null if set-up or submission failed.
CUfileBatchHandle_t submit_one(CUfileHandle_t fh, void* buf, size_t size, CUfileOpcode_t op) {
  CUfileBatchHandle_t bh = nullptr;
  if (cuFileBatchIOSetUp(&bh, 1).err != CU_FILE_SUCCESS) return nullptr;
  CUfileIOParams_t p{};
  p.mode = CUFILE_BATCH;
  p.fh = fh;
  p.opcode = op;
  p.u.batch.devPtr_base = buf;
  p.u.batch.size = size;
  if (cuFileBatchIOSubmit(bh, 1, &p, 0).err == CU_FILE_SUCCESS) return bh;
  cuFileBatchIODestroy(bh);
  return nullptr;
}

// Waits (up to a minute) for the entry of a batch from submit_one and destroys the batch: its
// byte count, or -1 if it did not complete.
ssize_t finish_one(CUfileBatchHandle_t bh) {
  if (bh == nullptr) return -1;
  CUfileIOEvents_t ev{};
  unsigned nr = 0;
  for (int i = 0; i < 600 && nr == 0; ++i) {
    nr = 1;
    timespec t{0, 100 * 1000 * 1000};
    if (cuFileBatchIOGetStatus(bh, 1, &nr, &ev, &t).err != CU_FILE_SUCCESS) break;
  }
  cuFileBatchIODestroy(bh);
  return nr == 1 && ev.status == CUFILE_COMPLETE ? static_cast<ssize_t>(ev.ret) : -1;
}

ssize_t batch_io(CUfileHandle_t fh, void* buf, size_t size, CUfileOpcode_t op) {
  return finish_one(submit_one(fh, buf, size, op));
}

TEST_P(LegacyOrder, ABatchWriteStoresWhatAMemsetQueuedBeforeItsSubmission) {
  ssize_t n = behind_queued_memset([&] { return batch_io(h_.get(), buf_->ptr(), size(), CUFILE_WRITE); });
  ASSERT_EQ(n, static_cast<ssize_t>(size()));
  std::vector<uint8_t> file = read_file(path_, 0, size());
  EXPECT_EQ(not_filled(file.data(), size(), kQueued), "")
      << "the batch write stored bytes from before the memset queued ahead of it";
}

TEST_P(LegacyOrder, ABatchReadIsNotOverwrittenByAMemsetQueuedBeforeItsSubmission) {
  ssize_t n = behind_queued_memset([&] { return batch_io(h_.get(), buf_->ptr(), size(), CUFILE_READ); });
  ASSERT_EQ(n, static_cast<ssize_t>(size()));
  ASSERT_EQ(drv()->StreamSynchronize(nullptr), cu::CUDA_SUCCESS);
  std::vector<uint8_t> got = buf_->read_back(0, size());
  EXPECT_EQ(first_mismatch(got.data(), data_.data(), size()), "")
      << "the memset queued before the batch read landed on top of it";
}

// A fork while a worker's copy waits behind the legacy stream. Whatever holds that stream may
// be waiting for the thread that forks (here that thread opens the gate itself, once fork()
// returned): the fork must not wait for the worker. Found by the seeded simulation, where a
// cuFile stream op's host function, on a blocking stream ahead of the legacy stream's work,
// waited for Runtime's lock, which the forking thread held across fork().
TEST_P(LegacyOrder, AForkDoesNotWaitForACopyHeldBehindTheLegacyStream) {
  Watchdog dog(std::chrono::seconds(60), "fork while a copy waits behind the legacy stream");
  StreamGate gate;
  ASSERT_EQ(gate.enqueue(nullptr), cu::CUDA_SUCCESS);
  ASSERT_EQ(memset_(dev(), kQueued, size()), cu::CUDA_SUCCESS);
  CUfileBatchHandle_t bh = submit_one(h_.get(), buf_->ptr(), size(), CUFILE_READ);
  ASSERT_NE(bh, nullptr);
  // Time for a worker to read the file, queue its copy behind the fence and wait for it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  gate.release();
  // Waiting for the worker, fork() returns only when the gate gives up by itself (30 s).
  EXPECT_LT(took.count(), 20.0) << "fork() waited for the copy held behind the legacy stream";
  ASSERT_GT(pid, 0);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_EQ(finish_one(bh), static_cast<ssize_t>(size()));
  ASSERT_EQ(drv()->StreamSynchronize(nullptr), cu::CUDA_SUCCESS);
  std::vector<uint8_t> got = buf_->read_back(0, size());
  EXPECT_EQ(first_mismatch(got.data(), data_.data(), size()), "")
      << "the memset queued before the batch read landed on top of it";
}

// Inline small IO (its own blocking streams) and the executor's pipeline (one and many chunks).
INSTANTIATE_TEST_SUITE_P(Sizes, LegacyOrder, ::testing::Values(4 * KiB, 40000, 1 * MiB, 9 * MiB),
                         [](const auto& info) { return std::to_string(info.param); });

}  // namespace
}  // namespace capi_test
