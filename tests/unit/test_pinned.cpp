// cuda::free_pinned: staging the driver refuses to unregister is said, not dropped in silence
// (its pages would stay pinned after the unmap), except when the driver has shut down.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "../support/include/fakecuda.h"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"

namespace gpufile::cuda {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBytes = 1 << 20;

// What the log said at WARN and above while `fn` ran.
std::string warnings_during(const std::function<void()>& fn) {
  const fs::path path = fs::temp_directory_path() / ("gpufile_pinned_" + std::to_string(getpid()) + ".log");
  Settings s;
  s.log_file = path.string();
  s.log_level = LogLevel::warn;
  log::configure(s);
  fn();
  log::configure(Settings{});
  log::set_level(LogLevel::warn);  // the state before any configure()
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(path);
  return text.str();
}

TEST(FreePinned, StagingTheDriverWillNotUnregisterIsSaid) {
  auto fail = FAKECUDA_FN(fakecuda_fail_call);
  auto registered = FAKECUDA_FN(fakecuda_live_registered_bytes);
  const Driver* d = driver();
  if (fail == nullptr || registered == nullptr || d == nullptr)
    GTEST_SKIP() << "needs the CUDA driver's test double (its fault rules)";
  ScopedAnyContext context;
  for (const CUresult refusal : {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_DEINITIALIZED}) {
    void* p = nullptr;
    ASSERT_FALSE(alloc_pinned(kBytes, &p));
    const size_t held = registered();
    ASSERT_GE(held, kBytes);
    ASSERT_EQ(fail("cuMemHostUnregister", 1, refusal), 0);
    const std::string said = warnings_during([&] { free_pinned(p, kBytes); });
    // Refused: the double still holds the registration, as the driver would. Dropped here from
    // the double's books only (the memory is unmapped), so that no later mapping meets it.
    EXPECT_EQ(registered(), held);
    EXPECT_EQ(d->MemHostUnregister(p), CUDA_SUCCESS);
    if (refusal == CUDA_ERROR_INVALID_VALUE)
      EXPECT_NE(said.find("unpinning 1048576 bytes of staging failed (CUresult 1): they stay pinned"),
                std::string::npos)
          << said;
    else
      EXPECT_EQ(said, "") << "a driver that has shut down lets go of everything itself";
  }
  // Unregistered as asked: nothing said, nothing held.
  void* p = nullptr;
  ASSERT_FALSE(alloc_pinned(kBytes, &p));
  const size_t held = registered();
  EXPECT_EQ(warnings_during([&] { free_pinned(p, kBytes); }), "");
  EXPECT_EQ(registered(), held - kBytes);
}

}  // namespace
}  // namespace gpufile::cuda
