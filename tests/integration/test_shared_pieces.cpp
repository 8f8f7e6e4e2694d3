// Suite: staged pieces where several GPUs share the host (exec::shared_piece_bytes). A staged
// read of cached bytes into GPU memory moves them in pieces that keep the host's staging within
// its last-level cache once other GPUs' processes are known to share the host; gpufile check's
// report says how large; synchronous and batch reads move every byte either way; reads that go
// O_DIRECT keep their own piece size (gpufile.cold_piece_kb).
#include "common.hpp"
#include "exec/runtime.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;
constexpr size_t kFileSize = 24 * MiB;

class SharedPieces : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    if (!has_driver()) GTEST_SKIP() << no_driver_reason();
    fake_ = fake_controls();
    Rng rng(test_seed() * 61);
    path_ = dir_.file("shared.bin");
    data_ = rng.bytes(kFileSize);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, data_.data(), data_.size()));  // cached: just written
    setenv("GPUFILE_PAGECACHE_DMA_MB", "0", 1);  // every read staged: no windows
    setenv("GPUFILE_WORKERS", "4", 1);
  }
  void TearDown() override {
    h_.reset();
    buf_.reset();
    session_.reset();
    for (const char* v : {"GPUFILE_PAGECACHE_DMA_MB", "GPUFILE_WORKERS", "GPUFILE_SHARED_PIECE_KB",
                          "LOCAL_WORLD_SIZE", "GPUFILE_CACHE_POLICY"})
      unsetenv(v);
    CapiTest::TearDown();
  }

  // The session (with GPUFILE_DIRECT_IO = `direct_io`), a device buffer of the file's size, the
  // file opened for reading.
  void open_session(const char* direct_io = nullptr) {
    session_ = std::make_unique<DriverSession>(EngineConfig{nullptr, direct_io});
    ASSERT_TRUE(session_->ok()) << session_->error();
    std::string why;
    buf_ = Buffer::make(Mem::device, kFileSize, &why);
    ASSERT_TRUE(buf_) << why;
    h_ = std::make_unique<Handle>(path_, O_RDONLY);
    ASSERT_TRUE(h_->ok());
  }

  gpufile::Runtime::FileReport report(Handle& h) {
    gpufile::Runtime::FileReport r;
    EXPECT_FALSE(gpufile::Runtime::instance().explain_file(h.get(), &r));
    return r;
  }

  // The whole file into GPU memory by one synchronous read, every byte checked; the copies the
  // read made to the GPU.
  unsigned long long read_whole(Handle& h, Buffer& buf) {
    buf.fill(0, kFileSize, 0xEE);
    const unsigned long long before = fake_.host_to_device_copies();
    EXPECT_EQ(cuFileRead(h.get(), buf.ptr(), kFileSize, 0, 0), static_cast<ssize_t>(kFileSize));
    EXPECT_EQ(first_mismatch(buf.read_back(0, kFileSize).data(), data_.data(), kFileSize), "")
        << "seed " << test_seed();
    return fake_.host_to_device_copies() - before;
  }

  // Two batch entries of half the file each, every byte checked.
  void read_batch(Handle& h, Buffer& buf) {
    buf.fill(0, kFileSize, 0xEE);
    CUfileIOParams_t io[2] = {};
    for (unsigned i = 0; i < 2; ++i) {
      io[i].mode = CUFILE_BATCH;
      io[i].u.batch.devPtr_base = buf.ptr();
      io[i].u.batch.file_offset = static_cast<off_t>(i * kFileSize / 2);
      io[i].u.batch.devPtr_offset = static_cast<off_t>(i * kFileSize / 2);
      io[i].u.batch.size = kFileSize / 2;
      io[i].fh = h.get();
      io[i].opcode = CUFILE_READ;
    }
    CUfileBatchHandle_t b = nullptr;
    ASSERT_EQ(cuFileBatchIOSetUp(&b, 2).err, CU_FILE_SUCCESS);
    ASSERT_EQ(cuFileBatchIOSubmit(b, 2, io, 0).err, CU_FILE_SUCCESS);
    CUfileIOEvents_t ev[2] = {};
    unsigned nr = 2;
    timespec limit{30, 0};
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 2, &nr, ev, &limit).err, CU_FILE_SUCCESS);
    cuFileBatchIODestroy(b);
    ASSERT_EQ(nr, 2u);
    for (const CUfileIOEvents_t& e : ev) {
      EXPECT_EQ(e.status, CUFILE_COMPLETE);
      EXPECT_EQ(e.ret, kFileSize / 2);
    }
    EXPECT_EQ(first_mismatch(buf.read_back(0, kFileSize).data(), data_.data(), kFileSize), "")
        << "seed " << test_seed();
  }

  FakeControls fake_;
  TempDir dir_;
  std::string path_;
  std::vector<uint8_t> data_;
  std::unique_ptr<DriverSession> session_;
  std::unique_ptr<Buffer> buf_;
  std::unique_ptr<Handle> h_;
};

TEST_F(SharedPieces, RanksOfOneJobStageCachedBytesInTheSharedPieceSize) {
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("GPUFILE_SHARED_PIECE_KB", "64", 1);
  ASSERT_NO_FATAL_FAILURE(open_session());
  const gpufile::Runtime::FileReport r = report(*h_);
  EXPECT_EQ(r.shared_piece, 64 * KiB);
  EXPECT_EQ(r.staging_processes, 4u);
  EXPECT_EQ(r.slab, 4 * MiB);
  const unsigned long long n = read_whole(*h_, *buf_);
  if (fake_.call_count) {
    EXPECT_GE(n, kFileSize / (64 * KiB)) << "pieces larger than 64 KiB";
  }
  ASSERT_NO_FATAL_FAILURE(read_batch(*h_, *buf_));
}

TEST_F(SharedPieces, AProcessAloneKeepsWholeSlabs) {
  setenv("GPUFILE_SHARED_PIECE_KB", "64", 1);  // applies only where the host is shared
  ASSERT_NO_FATAL_FAILURE(open_session());
  int gpus = 0;
  ASSERT_EQ(drv()->DeviceGetCount(&gpus), cu::CUDA_SUCCESS);
  const gpufile::Runtime::FileReport r = report(*h_);
  if (gpus == 1) {  // several GPUs seen: NVML (the double has none) cannot say it is alone
    EXPECT_EQ(r.shared_piece, 0u);
    EXPECT_EQ(r.staging_processes, 0u);
  }
  const unsigned long long n = read_whole(*h_, *buf_);
  // Pieces no smaller than min_chunk_kb (256 KiB) whatever the threads sharing the read.
  if (fake_.call_count && gpus == 1) {
    EXPECT_LE(n, kFileSize / (256 * KiB)) << "cut finer than a chunk";
  }
  ASSERT_NO_FATAL_FAILURE(read_batch(*h_, *buf_));
}

// O_DIRECT reads go by gpufile.cold_piece_kb (512 KiB), not by the shared piece size.
TEST_F(SharedPieces, DirectReadsAreNotCutToTheSharedPieceSize) {
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("GPUFILE_SHARED_PIECE_KB", "64", 1);
  setenv("GPUFILE_CACHE_POLICY", "bypass", 1);
  ASSERT_NO_FATAL_FAILURE(open_session("always"));
  if (!report(*h_).direct_capable) GTEST_SKIP() << "this file system takes no O_DIRECT";
  const unsigned long long n = read_whole(*h_, *buf_);
  if (fake_.call_count) {
    EXPECT_LE(n, kFileSize / (256 * KiB)) << "O_DIRECT pieces were cut to the shared size";
  }
}

}  // namespace
}  // namespace capi_test
