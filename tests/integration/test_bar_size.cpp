// cuFileGetBARSizeInKB: from NVML (tests/support/fakenvml stands in for libnvidia-ml.so.1),
// naming the GPU by the PCI address the CUDA driver gives; sysfs when NVML cannot say; 0 when
// neither knows. bar_size_tests runs with FAKECUDA_DEVICES=2 (the double's devices sit at PCI
// buses 0x10 and 0x11) and GPUFILE_NVML_LIBRARY pointing at the NVML double;
// bar_size_without_nvml runs BarSize.WithoutNvml* with it pointing nowhere.
#include <cufile.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

constexpr size_t kKiBPerMiB = 1024;

class BarSize : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FAKENVML_BAR1");
    unsetenv("FAKENVML_FAIL");
    ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  }
  void TearDown() override {
    cuFileDriverClose();
    unsetenv("FAKENVML_BAR1");
    unsetenv("FAKENVML_FAIL");
  }
  static size_t bar_kb(int gpu) {
    size_t kb = 12345;
    CUfileError_t e = cuFileGetBARSizeInKB(gpu, &kb);
    EXPECT_EQ(e.err, CU_FILE_SUCCESS) << "gpu " << gpu;
    return kb;
  }
  // The PCI address the NVML double was last asked about.
  static std::string last_bus_id() {
    const char* lib = std::getenv("GPUFILE_NVML_LIBRARY");
    void* h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    auto fn = h ? reinterpret_cast<const char* (*)()>(dlsym(h, "fakenvml_last_bus_id")) : nullptr;
    return fn ? fn() : "";
  }
};

TEST_F(BarSize, ComesFromNvml) {
  EXPECT_EQ(bar_kb(0), 131072 * kKiBPerMiB);  // the double's default: 128 GiB
  EXPECT_EQ(last_bus_id(), "0000:10:00.0");
}

TEST_F(BarSize, EachGpuIsNamedByItsPciAddress) {
  setenv("FAKENVML_BAR1", "0000:11:00.0=65536,0000:10:00.0=32768", 1);
  EXPECT_EQ(bar_kb(1), 65536 * kKiBPerMiB);
  EXPECT_EQ(last_bus_id(), "0000:11:00.0");
  EXPECT_EQ(bar_kb(0), 32768 * kKiBPerMiB);
  EXPECT_EQ(last_bus_id(), "0000:10:00.0");
}

// Where NVML fails or does not know the GPU, sysfs answers; the double's PCI addresses do not
// exist there, so the answer is 0, and the call still succeeds.
TEST_F(BarSize, NvmlThatCannotSayFallsBackToSysfs) {
  setenv("FAKENVML_BAR1", "0000:99:00.0=4096", 1);
  EXPECT_EQ(bar_kb(0), 0u);
  unsetenv("FAKENVML_BAR1");
  for (const char* call : {"handle", "bar1"}) {
    setenv("FAKENVML_FAIL", call, 1);
    EXPECT_EQ(bar_kb(0), 0u) << "FAKENVML_FAIL=" << call;
  }
}

TEST_F(BarSize, BadArgumentsAreRefused) {
  size_t kb = 0;
  EXPECT_EQ(cuFileGetBARSizeInKB(2, &kb).err, CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileGetBARSizeInKB(-1, &kb).err, CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileGetBARSizeInKB(0, nullptr).err, CU_FILE_INVALID_VALUE);
}

// NVIDIA's library answers before open (tests/conformance, section bar); so does gpufile,
// without opening the driver.
TEST(BarSizeClosed, AnswersWithoutOpeningTheDriver) {
  size_t kb = 0;
  EXPECT_EQ(cuFileGetBARSizeInKB(0, &kb).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileGetBARSizeInKB(-1, &kb).err, CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileUseCount(), 0);
  CUfileDrvProps_t props;
  EXPECT_EQ(cuFileDriverGetProperties(&props).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 4).err, CU_FILE_SUCCESS)
      << "the driver must still be closed";
}

// GPUFILE_NVML_LIBRARY points nowhere: no NVML, no crash, sysfs's answer (0 here).
TEST_F(BarSize, WithoutNvmlTheCallStillSucceeds) { EXPECT_EQ(bar_kb(0), 0u); }

}  // namespace
