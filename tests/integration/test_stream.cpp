// Suite 4: the stream API (cuFileReadAsync / cuFileWriteAsync / cuFileStream(De)Register,
// spec §3.9). Needs a CUDA driver (streams); skips without one.
//
// Synchronous CUDA copies are ordered with the legacy default stream (and, through it, with every
// blocking stream), so while a gate holds a stream the tests make no synchronous copy: uploads
// happen before the gate, downloads after the stream synchronised.
#include <cinttypes>

#include "common.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

class StreamTest : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    CAPI_REQUIRE_DRIVER();
    session_ = std::make_unique<DriverSession>();
    ASSERT_TRUE(session_->ok()) << session_->error();
    seed_ = test_seed();
    Rng rng(seed_);
    path_ = dir_.file("stream.bin");
    shadow_ = rng.bytes(8 * MiB);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, shadow_.data(), shadow_.size()));
    h_ = Handle(path_, O_RDWR);
    ASSERT_TRUE(h_.ok());
    std::string why;
    buf_ = Buffer::make(Mem::device, 6 * MiB, &why);
    ASSERT_TRUE(buf_) << why;
    // Host memory the library writes *bytes_p into and reads parameters from: pinned, as the
    // docs ask.
    void* p = nullptr;
    ASSERT_EQ(drv()->MemHostAlloc(&p, 4096, 0), cu::CUDA_SUCCESS);
    params_ = static_cast<Params*>(p);
    ASSERT_EQ(drv()->StreamCreate(&stream_, 0), cu::CUDA_SUCCESS);
  }
  void TearDown() override {
    if (stream_) {
      drv()->StreamSynchronize(stream_);
      drv()->StreamDestroy(stream_);
    }
    if (drv()) drv()->StreamSynchronize(nullptr);
    if (params_) drv()->MemFreeHost(params_);
    buf_.reset();
    h_.reset();
    session_.reset();
    CapiTest::TearDown();
  }

  struct Params {
    size_t size;
    off_t file_offset;
    off_t buf_offset;
    ssize_t bytes;
  };

  CUstream cs(cu::CUstream s) { return reinterpret_cast<CUstream>(s); }

  TempDir dir_;
  std::unique_ptr<DriverSession> session_;
  uint64_t seed_ = 0;
  std::string path_;
  std::vector<uint8_t> shadow_;
  Handle h_;
  std::unique_ptr<Buffer> buf_;
  Params* params_ = nullptr;
  cu::CUstream stream_ = nullptr;
};

// Reads and writes on a created stream and on the NULL stream; *bytes_p reads 0 right after
// submission (the stream is held by a gate) and the byte count after synchronisation.
TEST_F(StreamTest, ReadAndWriteOnCreatedAndNullStream) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(60), "ReadAndWriteOnCreatedAndNullStream");
  Rng rng(seed_ ^ 1);
  for (cu::CUstream s : {stream_, static_cast<cu::CUstream>(nullptr)}) {
    for (size_t size : {size_t(4097), size_t(3 * MiB + 5)}) {
      SCOPED_TRACE(std::string(s ? "created stream" : "NULL stream") + " size " + std::to_string(size));
      // ---- read
      buf_->fill(0, size + 8192, 0xEE);
      Params& p = *params_;
      p = Params{size, 4096 + 7, 3, 12345};
      StreamGate gate;
      ASSERT_EQ(gate.enqueue(s), cu::CUDA_SUCCESS);
      CUfileError_t st = cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset,
                                         &p.bytes, cs(s));
      ASSERT_EQ(st.err, CU_FILE_SUCCESS);
      EXPECT_EQ(p.bytes, 0) << "*bytes_p must read 0 at submission";
      EXPECT_TRUE(gate.wait_reached(std::chrono::seconds(10)));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(p.bytes, 0) << "the IO ran before the stream reached it";
      gate.release();
      ASSERT_EQ(drv()->StreamSynchronize(s), cu::CUDA_SUCCESS);
      EXPECT_EQ(p.bytes, static_cast<ssize_t>(size));
      std::vector<uint8_t> got = buf_->read_back(0, size + 8192);
      EXPECT_EQ(not_filled(got.data(), 3, 0xEE), "");
      EXPECT_EQ(first_mismatch(got.data() + 3, shadow_.data() + 4096 + 7, size), "");
      EXPECT_EQ(not_filled(got.data() + 3 + size, 8192 - 3, 0xEE), "");

      // ---- write
      std::vector<uint8_t> data = rng.bytes(size);
      buf_->upload(11, data.data(), size);
      p = Params{size, 123457, 11, 777};
      ASSERT_EQ(cuFileWriteAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                                 cs(s)).err,
                CU_FILE_SUCCESS);
      // No gate here: the stream may already have run the op, so *bytes_p is not checked
      // for 0 (the read above checks that behind a gate).
      ASSERT_EQ(drv()->StreamSynchronize(s), cu::CUDA_SUCCESS);
      EXPECT_EQ(p.bytes, static_cast<ssize_t>(size));
      std::memcpy(shadow_.data() + 123457, data.data(), size);
      std::vector<uint8_t> file = read_file(path_, 0, shadow_.size());
      EXPECT_EQ(first_mismatch(file.data(), shadow_.data(), shadow_.size()), "");
    }
  }
}

// Host and managed memory on streams too.
TEST_F(StreamTest, EveryMemoryKind) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(60), "EveryMemoryKind");
  Rng rng(seed_ ^ 3);
  for (Mem kind : kAllMem) {
    SCOPED_TRACE(mem_name(kind));
    std::string why;
    auto b = Buffer::make(kind, 2 * MiB, &why);
    if (!b) continue;
    for (size_t size : {size_t(100000), size_t(1 * MiB + 1)}) {
      b->fill(0, 2 * MiB, 0xEE);
      Params& p = *params_;
      p = Params{size, 5, 7, 1};
      ASSERT_EQ(cuFileReadAsync(h_.get(), b->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes, cs(stream_)).err,
                CU_FILE_SUCCESS);
      ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
      EXPECT_EQ(p.bytes, static_cast<ssize_t>(size));
      std::vector<uint8_t> got = b->read_back(0, 2 * MiB);
      EXPECT_EQ(not_filled(got.data(), 7, 0xEE), "");
      EXPECT_EQ(first_mismatch(got.data() + 7, shadow_.data() + 5, size), "");
      EXPECT_EQ(not_filled(got.data() + 7 + size, 2 * MiB - 7 - size, 0xEE), "");
      std::vector<uint8_t> data = rng.bytes(size);
      b->upload(3, data.data(), size);
      p = Params{size, static_cast<off_t>(7 * MiB - size + 1), 3, 1};
      const off_t at = p.file_offset;
      ASSERT_EQ(cuFileWriteAsync(h_.get(), b->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes, cs(stream_)).err,
                CU_FILE_SUCCESS);
      ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
      EXPECT_EQ(p.bytes, static_cast<ssize_t>(size));
      std::memcpy(shadow_.data() + at, data.data(), size);
      EXPECT_EQ(read_file(path_, 0, shadow_.size()), shadow_);
    }
  }
}

// Several ops queued back to back on one stream run in order: a write then a read of the same
// range returns the written bytes.
TEST_F(StreamTest, OpsRunInStreamOrder) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(60), "OpsRunInStreamOrder");
  Rng rng(seed_ ^ 2);
  const size_t size = 1 * MiB + 3;
  std::vector<uint8_t> data = rng.bytes(size);
  buf_->upload(0, data.data(), size);
  buf_->fill(2 * MiB, size, 0);
  Params* p = params_;  // two parameter blocks in the pinned page
  p[0] = Params{size, 65536 + 1, 0, -1};
  p[1] = Params{size, 65536 + 1, 2 * MiB, -1};
  StreamGate gate;
  ASSERT_EQ(gate.enqueue(stream_), cu::CUDA_SUCCESS);
  ASSERT_EQ(cuFileWriteAsync(h_.get(), buf_->ptr(), &p[0].size, &p[0].file_offset, &p[0].buf_offset,
                             &p[0].bytes, cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p[1].size, &p[1].file_offset, &p[1].buf_offset,
                            &p[1].bytes, cs(stream_)).err,
            CU_FILE_SUCCESS);
  gate.release();
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_EQ(p[0].bytes, static_cast<ssize_t>(size));
  EXPECT_EQ(p[1].bytes, static_cast<ssize_t>(size));
  std::vector<uint8_t> got = buf_->read_back(2 * MiB, size);
  EXPECT_EQ(first_mismatch(got.data(), data.data(), size), "");
}

// Parameters are read when the stream executes the op, not at submission [P] - with stream
// flags 0 and 0xF (fixed-at-submit flags are not honoured by NVIDIA's library either).
TEST_F(StreamTest, ParametersChangedAfterSubmissionAreHonoured) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(60), "ParametersChangedAfterSubmissionAreHonoured");
  for (unsigned flags : {0u, 0xFu, ~0u}) {
    SCOPED_TRACE("stream flags " + std::to_string(flags));
    if (flags != ~0u) {
      ASSERT_EQ(cuFileStreamRegister(cs(stream_), flags).err, CU_FILE_SUCCESS);
    }
    // ~0u: the stream is not registered at all.
    const bool aligned = flags & CU_FILE_STREAM_PAGE_ALIGNED_INPUTS;
    buf_->fill(0, 3 * MiB, 0xEE);
    Params& p = *params_;
    p = Params{2 * MiB, 0, 0, 99};  // the maximum size at submission
    StreamGate gate;
    ASSERT_EQ(gate.enqueue(stream_), cu::CUDA_SUCCESS);
    ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                              cs(stream_)).err,
              CU_FILE_SUCCESS);
    EXPECT_EQ(p.bytes, 0);
    // Change the size and the file offset before the stream gets there. (The buffer offset
    // must keep its submission value: gpufile enqueues the copies at submission, see
    // docs/compatibility.md; BufferOffsetChangedAfterSubmissionFailsCleanly covers that.)
    const size_t new_size = aligned ? 1 * MiB : 1 * MiB - 777;
    const off_t new_file = aligned ? 3 * MiB : 3 * MiB + 5;
    const off_t new_buf = 0;
    p.size = new_size;
    p.file_offset = new_file;
    gate.release();
    ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
    EXPECT_EQ(p.bytes, static_cast<ssize_t>(new_size));
    std::vector<uint8_t> got = buf_->read_back(0, 3 * MiB);
    EXPECT_EQ(not_filled(got.data(), static_cast<size_t>(new_buf), 0xEE), "");
    EXPECT_EQ(first_mismatch(got.data() + new_buf, shadow_.data() + new_file, new_size), "");
    EXPECT_EQ(not_filled(got.data() + new_buf + new_size, 3 * MiB - new_buf - new_size, 0xEE), "");
    if (flags != ~0u) {
      EXPECT_EQ(cuFileStreamDeregister(cs(stream_)).err, CU_FILE_SUCCESS);
    }
  }
}

TEST_F(StreamTest, BufferOffsetChangedAfterSubmissionFailsCleanly) {
  Watchdog dog(std::chrono::seconds(60), "BufferOffsetChangedAfterSubmissionFailsCleanly");
  buf_->fill(0, 2 * MiB, 0xEE);
  Params& p = *params_;
  p = Params{1 * MiB, 0, 0, 99};
  StreamGate gate;
  ASSERT_EQ(gate.enqueue(stream_), cu::CUDA_SUCCESS);
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  p.buf_offset = 4096;
  gate.release();
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_LT(p.bytes, 0) << "a changed buffer offset must fail the op";
  EXPECT_EQ(not_filled(buf_->read_back(0, 2 * MiB).data(), 2 * MiB, 0xEE), "");
}

TEST_F(StreamTest, RegisterDeregisterTwice) {
  EXPECT_EQ(cuFileStreamRegister(cs(stream_), 0).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileStreamRegister(cs(stream_), 0).err, CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileStreamDeregister(cs(stream_)).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileStreamDeregister(cs(stream_)).err, CU_FILE_INVALID_VALUE);
  // The NULL stream can be registered too.
  EXPECT_EQ(cuFileStreamRegister(nullptr, 0xF).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileStreamDeregister(nullptr).err, CU_FILE_SUCCESS);
}

// PAGE_ALIGNED_INPUTS (8): an unaligned request is refused at submission with 5022 and
// *bytes_p = -22 [P]; aligned ones work.
TEST_F(StreamTest, PageAlignedInputsRefusesUnaligned) {
  Watchdog dog(std::chrono::seconds(60), "PageAlignedInputsRefusesUnaligned");
  ASSERT_EQ(cuFileStreamRegister(cs(stream_), CU_FILE_STREAM_PAGE_ALIGNED_INPUTS).err, CU_FILE_SUCCESS);
  Params& p = *params_;
  const Params bad[] = {{4095, 0, 0, 1}, {4096, 1, 0, 1}, {4096, 0, 7, 1}, {8192 + 1, 4096, 4096, 1}};
  for (const Params& b : bad) {
    SCOPED_TRACE("size " + std::to_string(b.size) + " file_offset " + std::to_string(b.file_offset) +
                 " buf_offset " + std::to_string(b.buf_offset));
    for (int write = 0; write < 2; ++write) {
      p = b;
      CUfileError_t st = write ? cuFileWriteAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset,
                                                  &p.bytes, cs(stream_))
                               : cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset,
                                                 &p.bytes, cs(stream_));
      EXPECT_EQ(st.err, CU_FILE_INVALID_VALUE);
      EXPECT_EQ(p.bytes, -22);
    }
  }
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_EQ(read_file(path_, 0, shadow_.size()), shadow_) << "a refused write changed the file";
  p = Params{8192, 4096, 4096, 1};
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_EQ(p.bytes, 8192);
  EXPECT_EQ(first_mismatch(buf_->read_back(4096, 8192).data(), shadow_.data() + 4096, 8192), "");
  EXPECT_EQ(cuFileStreamDeregister(cs(stream_)).err, CU_FILE_SUCCESS);
}

// Bad arguments at submission: an error, and no IO later.
TEST_F(StreamTest, BadSubmissions) {
  Watchdog dog(std::chrono::seconds(60), "BadSubmissions");
  Params& p = *params_;
  p = Params{4096, 0, 0, 1};
  EXPECT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), nullptr, &p.file_offset, &p.buf_offset, &p.bytes,
                            cs(stream_)).err,
            CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, nullptr, &p.buf_offset, &p.bytes, cs(stream_)).err,
            CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, nullptr, &p.bytes, cs(stream_)).err,
            CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, nullptr,
                            cs(stream_)).err,
            CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileReadAsync(h_.get(), nullptr, &p.size, &p.file_offset, &p.buf_offset, &p.bytes, cs(stream_)).err,
            CU_FILE_INVALID_VALUE);
  p.file_offset = -1;
  p.bytes = 1;
  EXPECT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                            cs(stream_)).err,
            CU_FILE_INVALID_VALUE);
  EXPECT_EQ(p.bytes, -22);
  // A deregistered handle.
  Handle gone(path_, O_RDWR);
  ASSERT_TRUE(gone.ok());
  CUfileHandle_t stale = gone.get();
  cuFileHandleDeregister(stale);
  gone.release_handle();
  p = Params{4096, 0, 0, 1};
  EXPECT_NE(cuFileReadAsync(stale, buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
}

// An op whose parameters turn bad before it executes reports a negative *bytes_p, writes
// nothing, and the stream goes on.
TEST_F(StreamTest, ParametersTurnBadBeforeExecution) {
  Watchdog dog(std::chrono::seconds(60), "ParametersTurnBadBeforeExecution");
  buf_->fill(0, 1 * MiB, 0xEE);
  Params* p = params_;
  p[0] = Params{4096, 0, 0, 1};
  p[1] = Params{4096, 8192, 0, 1};
  StreamGate gate;
  ASSERT_EQ(gate.enqueue(stream_), cu::CUDA_SUCCESS);
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p[0].size, &p[0].file_offset, &p[0].buf_offset, &p[0].bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p[1].size, &p[1].file_offset, &p[1].buf_offset, &p[1].bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  p[0].file_offset = -5;       // now invalid
  p[1].buf_offset = 12 * MiB;  // now past the allocation
  gate.release();
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_LT(p[0].bytes, 0) << "negative file offset at execution";
  EXPECT_LT(p[1].bytes, 0) << "buffer range past the allocation at execution";
  EXPECT_EQ(not_filled(buf_->read_back(0, 1 * MiB).data(), 1 * MiB, 0xEE), "");
  // The stream still works.
  p[0] = Params{4096, 0, 0, 1};
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p[0].size, &p[0].file_offset, &p[0].buf_offset, &p[0].bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_EQ(p[0].bytes, 4096);
}

// The handle is deregistered and the driver closed while a stream op waits behind a gate: no
// hang, no crash; the op reports a failure in *bytes_p and writes nothing.
//
// cuFileDriverClose frees pinned staging memory, and cuMemFreeHost waits for all queued work on
// every stream (as the real driver does) - the gated stream included. So close runs on another
// thread and the gate opens shortly after; whether close returned before that is only logged.
TEST_F(StreamTest, DriverClosedBeforeOpExecutes) {
  Watchdog dog(std::chrono::seconds(60), "DriverClosedBeforeOpExecutes");
  buf_->fill(0, 1 * MiB, 0xEE);
  Params& p = *params_;
  p = Params{1 * MiB, 0, 0, 1};
  StreamGate gate;
  ASSERT_EQ(gate.enqueue(stream_), cu::CUDA_SUCCESS);
  ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes,
                            cs(stream_)).err,
            CU_FILE_SUCCESS);
  h_.reset();  // deregister + close the fd: the op has not started, nothing to wait for
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    drain_driver();
    closed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const bool closed_early = closed.load();
  gate.release();
  closer.join();
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  if (!closed_early)
    std::printf("note: cuFileDriverClose waited for the gated user stream (cuMemFreeHost synchronises)\n");
  EXPECT_LT(p.bytes, 0) << "the op ran although its handle and the driver were gone";
  EXPECT_EQ(not_filled(buf_->read_back(0, 1 * MiB).data(), 1 * MiB, 0xEE), "");
}

// A device copy of an op fails (the test double fails it). Whether that surfaces at
// submission (CU_FILE_CUDA_DRIVER_ERROR) or when the op runs, *bytes_p must end negative -
// never a byte count for data that did not reach the buffer - the buffer (read) or the file
// (write) keeps its bytes, and the stream goes on.
TEST_F(StreamTest, CopyFailureNeverReportsBytes) {
  const FakeControls fake = fake_controls();
  const auto fail = fake.fail_call;
  const auto reset = fake.reset_faults;
  if (!fail || !reset) GTEST_SKIP() << "needs the CUDA driver test double's fault controls";
  AtExit undo([&] { reset(); });
  Watchdog dog(std::chrono::seconds(60), "CopyFailureNeverReportsBytes");
  Params* p = params_;
  struct Case {
    bool write;
    const char* copy;  // the driver call that fails
  };
  for (const Case& c : {Case{false, "cuMemcpyHtoDAsync"}, Case{false, "cuMemcpyDtoHAsync"},
                        Case{true, "cuMemcpyDtoHAsync"}}) {
    SCOPED_TRACE(std::string(c.write ? "write" : "read") + ", failing " + c.copy);
    buf_->fill(0, 3 * MiB, 0xEE);
    p[0] = Params{2 * MiB, 4096, 0, 1};
    ASSERT_EQ(fail(c.copy, 1, 999), 0);
    CUfileError_t st = c.write ? cuFileWriteAsync(h_.get(), buf_->ptr(), &p[0].size, &p[0].file_offset,
                                                  &p[0].buf_offset, &p[0].bytes, cs(stream_))
                               : cuFileReadAsync(h_.get(), buf_->ptr(), &p[0].size, &p[0].file_offset,
                                                 &p[0].buf_offset, &p[0].bytes, cs(stream_));
    const ssize_t at_return = p[0].bytes;
    reset();
    drv()->StreamSynchronize(stream_);
    if (st.err != CU_FILE_SUCCESS) {
      EXPECT_EQ(st.err, CU_FILE_CUDA_DRIVER_ERROR);
      EXPECT_LT(at_return, 0);
      EXPECT_LT(p[0].bytes, 0) << "the call failed, yet the op later reported " << p[0].bytes << " bytes";
    } else {
      EXPECT_LT(p[0].bytes, 0) << "a failed copy must not be reported as bytes";
    }
    if (c.write) {
      EXPECT_EQ(read_file(path_, 0, shadow_.size()), shadow_) << "file changed by a failed write";
    } else {
      EXPECT_EQ(not_filled(buf_->read_back(0, 3 * MiB).data(), 3 * MiB, 0xEE), "")
          << "buffer changed by a failed read";
    }
    // The stream goes on.
    p[1] = Params{4096, 8192, 3 * MiB, 1};
    ASSERT_EQ(cuFileReadAsync(h_.get(), buf_->ptr(), &p[1].size, &p[1].file_offset, &p[1].buf_offset, &p[1].bytes,
                              cs(stream_)).err,
              CU_FILE_SUCCESS);
    ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
    EXPECT_EQ(p[1].bytes, 4096);
    EXPECT_EQ(first_mismatch(buf_->read_back(3 * MiB, 4096).data(), shadow_.data() + 8192, 4096), "");
  }
}

// Several threads submitting to the same stream at once (CUDA streams are thread-safe; the
// NULL stream is the common case). Each op must come out whole, whatever the interleaving of
// the submissions.
TEST_F(StreamTest, ConcurrentSubmittersOnOneStream) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "ConcurrentSubmittersOnOneStream");
  constexpr int kThreads = 8, kOps = 64, kRounds = 10;
  constexpr size_t kSlot = 16 * KiB;
  std::string why;
  auto b = Buffer::make(Mem::device, kThreads * kOps * kSlot, &why);
  ASSERT_TRUE(b) << why;
  // Parameter blocks must stay put until the stream ran the ops: one pinned block each.
  void* mem = nullptr;
  ASSERT_EQ(drv()->MemHostAlloc(&mem, kThreads * kOps * sizeof(Params), 0), cu::CUDA_SUCCESS);
  AtExit free_mem([&] { drv()->MemFreeHost(mem); });
  auto* ps = static_cast<Params*>(mem);
  for (cu::CUstream s : {stream_, static_cast<cu::CUstream>(nullptr)}) {
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE(std::string(s ? "created stream" : "NULL stream") + ", round " + std::to_string(round));
      b->fill(0, b->size(), 0);
      std::vector<std::string> errors(kThreads);
      std::atomic<int> ready{0};
      std::vector<std::thread> ts;
      for (int t = 0; t < kThreads; ++t) {
        ts.emplace_back([&, t] {
          bind_context();
          Rng rng(seed_ + 1000 * t + round);
          ++ready;
          while (ready.load() < kThreads) std::this_thread::yield();
          for (int i = 0; i < kOps; ++i) {
            Params& p = ps[t * kOps + i];
            p = Params{1 + rng.below(kSlot - 1), static_cast<off_t>(rng.below(6 * MiB)),
                       static_cast<off_t>((t * kOps + i) * kSlot), 1};
            if (cuFileReadAsync(h_.get(), b->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes, cs(s)).err !=
                CU_FILE_SUCCESS)
              errors[t] = "submit " + std::to_string(i);
          }
        });
      }
      for (auto& th : ts) th.join();
      ASSERT_EQ(drv()->StreamSynchronize(s), cu::CUDA_SUCCESS);
      std::vector<uint8_t> all = b->read_back(0, b->size());
      int bad = 0;
      for (int t = 0; t < kThreads; ++t) {
        EXPECT_EQ(errors[t], "") << "thread " << t;
        for (int i = 0; i < kOps; ++i) {
          const Params& p = ps[t * kOps + i];
          std::string m = p.bytes == static_cast<ssize_t>(p.size)
                              ? first_mismatch(all.data() + p.buf_offset, shadow_.data() + p.file_offset, p.size)
                              : "bytes " + std::to_string(p.bytes) + " of " + std::to_string(p.size);
          if (!m.empty() && bad++ < 3)
            ADD_FAILURE() << "thread " << t << " op " << i << " (file offset " << p.file_offset << ", " << p.size
                          << " bytes): " << m;
        }
      }
      ASSERT_EQ(bad, 0) << "ops that came out wrong (another op's bytes in their place)";
    }
  }
}

// Many ops on several streams from several threads.
TEST_F(StreamTest, ManyOpsOnSeveralStreams) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "ManyOpsOnSeveralStreams");
  constexpr int kThreads = 4, kOps = 24;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bind_context();
      cu::CUstream s = nullptr;
      if (drv()->StreamCreate(&s, t % 2 ? cu::CU_STREAM_NON_BLOCKING : 0) != cu::CUDA_SUCCESS) {
        errors[t] = "stream create";
        return;
      }
      std::string why;
      auto b = Buffer::make(Mem::device, kOps * 64 * KiB, &why);
      std::vector<Params> ps(kOps);
      Rng rng(seed_ + t);
      for (int i = 0; i < kOps; ++i) {
        ps[i] = Params{1 + rng.below(64 * KiB - 1), static_cast<off_t>(rng.below(6 * MiB)),
                       static_cast<off_t>(i * 64 * KiB), 1};
        if (cuFileReadAsync(h_.get(), b->ptr(), &ps[i].size, &ps[i].file_offset, &ps[i].buf_offset,
                            &ps[i].bytes, cs(s)).err != CU_FILE_SUCCESS)
          errors[t] = "submit " + std::to_string(i);
      }
      if (drv()->StreamSynchronize(s) != cu::CUDA_SUCCESS) errors[t] = "sync";
      for (int i = 0; i < kOps && errors[t].empty(); ++i) {
        if (ps[i].bytes != static_cast<ssize_t>(ps[i].size)) {
          errors[t] = "op " + std::to_string(i) + " bytes " + std::to_string(ps[i].bytes);
          break;
        }
        std::vector<uint8_t> got = b->read_back(static_cast<size_t>(ps[i].buf_offset), ps[i].size);
        std::string m = first_mismatch(got.data(), shadow_.data() + ps[i].file_offset, ps[i].size);
        if (!m.empty()) errors[t] = "op " + std::to_string(i) + ": " + m;
      }
      drv()->StreamDestroy(s);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// cuFile deregisters streams at driver close (spec §3.9): after a close and an open, registering
// the same stream again succeeds (it is not a double registration), and so does IO on it.
TEST_F(StreamTest, DriverCloseForgetsStreamRegistrations) {
  ASSERT_EQ(cuFileStreamRegister(cs(stream_), 0).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileStreamRegister(cs(stream_), 0).err, CU_FILE_INVALID_VALUE) << "a double registration";
  h_.release_handle();  // the close below drops the handle with the session
  drain_driver();
  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileStreamRegister(cs(stream_), 0).err, CU_FILE_SUCCESS) << "registered again after a reopen";
  CUfileHandle_t fh = nullptr;
  ASSERT_EQ(register_fd(h_.fd(), &fh).err, CU_FILE_SUCCESS);
  Params& p = *params_;
  p = Params{4096, 1, 0, -1};
  ASSERT_EQ(cuFileReadAsync(fh, buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes, cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_EQ(p.bytes, 4096);
  std::vector<uint8_t> got = buf_->read_back(0, 4096);
  EXPECT_EQ(first_mismatch(got.data(), shadow_.data() + 1, 4096), "");
  EXPECT_EQ(cuFileStreamDeregister(cs(stream_)).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileStreamDeregister(cs(stream_)).err, CU_FILE_INVALID_VALUE) << "a double deregistration";
  cuFileHandleDeregister(fh);
}

// The stream API's pinned staging is freed when the driver closes, also when the thread that
// closes it has no CUDA context current (the driver refuses cuMemHostUnregister there).
TEST_F(StreamTest, DriverCloseFromAThreadWithoutContextFreesStaging) {
  auto live = reinterpret_cast<size_t (*)()>(driver_symbol("fakecuda_live_registered_bytes"));
  if (live == nullptr) GTEST_SKIP() << "needs the CUDA driver test double";
  h_.reset();
  drain_driver();
  const size_t before = live();  // what earlier tests of this process left is not ours
  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  Handle h(path_, O_RDWR);
  ASSERT_TRUE(h.ok());
  Params& p = *params_;
  p = Params{100000, 3, 0, -1};
  ASSERT_EQ(cuFileReadAsync(h.get(), buf_->ptr(), &p.size, &p.file_offset, &p.buf_offset, &p.bytes, cs(stream_)).err,
            CU_FILE_SUCCESS);
  ASSERT_EQ(drv()->StreamSynchronize(stream_), cu::CUDA_SUCCESS);
  EXPECT_EQ(p.bytes, 100000);
  h.reset();
  std::thread([] { drain_driver(); }).join();  // a fresh thread: no context current
  EXPECT_EQ(cuFileUseCount(), 0);
  EXPECT_EQ(live(), before) << "pinned staging still registered after the driver closed";
}

}  // namespace
}  // namespace capi_test
