// cuda::device_to_borrow: which GPU's primary context a thread with none current borrows. A
// table-built driver answers which primary contexts are active; nothing is loaded.
#include <gtest/gtest.h>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"

namespace {

using gpufile::cuda::CUdevice;
using gpufile::cuda::CUresult;

unsigned g_active = 0;  // bit n: device n's primary context is active

CUresult device_get(CUdevice* dev, int ordinal) {
  *dev = ordinal;
  return gpufile::cuda::CUDA_SUCCESS;
}

CUresult primary_state(CUdevice dev, unsigned* flags, int* active) {
  *flags = 0;
  *active = (g_active >> dev) & 1u;
  return gpufile::cuda::CUDA_SUCCESS;
}

gpufile::cuda::Driver driver(int devices, bool knows_state) {
  gpufile::cuda::Driver d;
  d.device_count = devices;
  d.DeviceGet = device_get;
  if (knows_state) d.DevicePrimaryCtxGetState = primary_state;
  return d;
}

class DeviceToBorrow : public ::testing::Test {
 protected:
  void TearDown() override { gpufile::cuda::prefer_device(-1); }
};

TEST_F(DeviceToBorrow, TheFirstGpuAProcessMadeActive) {
  const auto d = driver(4, true);
  g_active = 0b0100;  // GPU 2: the framework's context
  gpufile::cuda::prefer_device(1);
  EXPECT_EQ(gpufile::cuda::device_to_borrow(d), 2);
  g_active = 0b1010;
  EXPECT_EQ(gpufile::cuda::device_to_borrow(d), 1);
}

TEST_F(DeviceToBorrow, ElseTheLocalRanksGpu) {
  const auto d = driver(4, true);
  g_active = 0;
  gpufile::cuda::prefer_device(3);
  EXPECT_EQ(gpufile::cuda::device_to_borrow(d), 3);
}

TEST_F(DeviceToBorrow, ElseDeviceZero) {
  const auto d = driver(2, true);
  g_active = 0;
  EXPECT_EQ(gpufile::cuda::device_to_borrow(d), 0) << "no preference";
  gpufile::cuda::prefer_device(5);  // a rank past the GPUs this process sees (CUDA_VISIBLE_DEVICES)
  EXPECT_EQ(gpufile::cuda::device_to_borrow(d), 0);
}

TEST_F(DeviceToBorrow, ADriverThatCannotTellGoesByThePreference) {
  const auto d = driver(2, false);
  g_active = 0b01;
  gpufile::cuda::prefer_device(1);
  EXPECT_EQ(gpufile::cuda::device_to_borrow(d), 1);
}

}  // namespace
