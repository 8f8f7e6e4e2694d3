// The CUDA contexts gpufile keeps resources in. A program may retain a GPU's primary context
// for a while and release its last reference while the cuFile driver stays open (a library's
// retain and release around its own calls, a test's teardown, a framework freeing an idle
// GPU): the driver then destroys the context, and with it every stream and event made in it.
// gpufile's workers and callers' staging buffers keep streams in each context they copied for,
// so they hold a primary context until those streams are gone (cuda::PrimaryHold). Against the
// test double, a stream used after its context went stops the process (the real driver may
// crash there, or not, by chance); the suite runs with two devices (capi.primary_contexts in
// CMakeLists.txt) and skips with fewer.
#include <fcntl.h>

#include <string>
#include <vector>

#include "common.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

class PrimaryContexts : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    if (!has_driver()) GTEST_SKIP() << no_driver_reason();
    if (drv()->device_count < 2) GTEST_SKIP() << "needs two GPUs (the double: FAKECUDA_DEVICES=2)";
    if (drv()->DevicePrimaryCtxGetState == nullptr) GTEST_SKIP() << "no cuDevicePrimaryCtxGetState";
    ASSERT_EQ(drv()->DeviceGet(&gpu1_, 1), cu::CUDA_SUCCESS);
    if (active(gpu1_)) GTEST_SKIP() << "GPU 1's primary context is active before the test";
  }
  void TearDown() override {
    bind_context();  // device 0's again, as every test expects
    CapiTest::TearDown();
  }

  static bool active(cu::CUdevice dev) {
    unsigned flags = 0;
    int on = 0;
    EXPECT_EQ(drv()->DevicePrimaryCtxGetState(dev, &flags, &on), cu::CUDA_SUCCESS);
    return on != 0;
  }

  // Retains GPU 1's primary context, reads the file into its memory (a small read, one of a
  // staging buffer's size, and one long enough for the workers) and checks every byte, then
  // gives the memory and the context back, as a program done with that GPU for now would.
  void read_on_gpu1(CUfileHandle_t fh, const std::vector<uint8_t>& want) {
    const cu::Driver* d = drv();
    cu::CUcontext ctx = nullptr;
    ASSERT_EQ(d->DevicePrimaryCtxRetain(&ctx, gpu1_), cu::CUDA_SUCCESS);
    ASSERT_EQ(d->CtxSetCurrent(ctx), cu::CUDA_SUCCESS);
    cu::CUdeviceptr dev = 0;
    ASSERT_EQ(d->MemAlloc(&dev, want.size()), cu::CUDA_SUCCESS);
    std::vector<uint8_t> got(want.size());
    for (size_t len : {4 * KiB, 1 * MiB, want.size()}) {
      SCOPED_TRACE(len);
      ASSERT_EQ(cuFileRead(fh, reinterpret_cast<void*>(dev), len, 0, 0), static_cast<ssize_t>(len));
      ASSERT_EQ(d->MemcpyDtoH(got.data(), dev, len), cu::CUDA_SUCCESS);
      EXPECT_EQ(first_mismatch(got.data(), want.data(), len), "");
    }
    EXPECT_EQ(d->MemFree(dev), cu::CUDA_SUCCESS);
    ASSERT_EQ(d->CtxSetCurrent(nullptr), cu::CUDA_SUCCESS);
    ASSERT_EQ(d->DevicePrimaryCtxRelease(gpu1_), cu::CUDA_SUCCESS);
  }

  cu::CUdevice gpu1_ = 0;
  TempDir dir_;
};

TEST_F(PrimaryContexts, AContextTheProgramReleasesKeepsGpufilesStreamsUntilTheDriverCloses) {
  Rng rng(test_seed());
  const std::vector<uint8_t> data = rng.bytes(48 * MiB);
  const std::string path = dir_.file("data.bin");
  write_file(path, data.data(), data.size());
  {
    DriverSession session;
    ASSERT_TRUE(session.ok()) << session.error();
    Handle h(path, O_RDONLY);
    ASSERT_TRUE(h.ok());
    read_on_gpu1(h.get(), data);
    // The program's last reference is gone; gpufile's streams there keep the context alive.
    EXPECT_TRUE(active(gpu1_)) << "GPU 1's context went with gpufile's streams in it";
    // The same handle comes back from a new retain: gpufile's streams for it must still work.
    read_on_gpu1(h.get(), data);
    bind_context();
  }
  // Closed: nothing of gpufile's holds GPU 1 any more.
  EXPECT_FALSE(active(gpu1_)) << "a retain of GPU 1's primary context outlived the driver";
}

}  // namespace
}  // namespace capi_test
