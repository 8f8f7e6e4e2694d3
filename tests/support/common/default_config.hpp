// A GoogleTest environment for suites that compare against cuFile's built-in defaults
// (properties, io_batchsize 128, ...): a machine's /etc/cufile.json must not change them, so
// the suite reads an empty JSON object instead, unless the caller chose a file with
// CUFILE_ENV_PATH_JSON. A suite registers it once:
//   [[maybe_unused]] auto* const kDefaultConfig =
//       ::testing::AddGlobalTestEnvironment(new test_support::DefaultConfig("capi"));
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace test_support {

class DefaultConfig : public ::testing::Environment {
 public:
  // `suite` names the temporary file, /tmp/gpufile-<suite>-config-XXXXXX.
  explicit DefaultConfig(std::string suite) : suite_(std::move(suite)) {}
  void SetUp() override {
    const char* chosen = std::getenv("CUFILE_ENV_PATH_JSON");
    if (chosen != nullptr && *chosen != '\0') return;
    std::string path = "/tmp/gpufile-" + suite_ + "-config-XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) return;
    const bool written = ::write(fd, "{}\n", 3) == 3;
    ::close(fd);
    if (!written) return;
    path_ = path;
    setenv("CUFILE_ENV_PATH_JSON", path_.c_str(), 1);
  }
  void TearDown() override {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

 private:
  std::string suite_;
  std::string path_;
};

}  // namespace test_support
