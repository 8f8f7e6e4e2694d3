// fork() after the library started (matrix row 36): the child inherits the session but none of
// its IO workers, so an IO through it would wait for ever. The child must get clear errors for
// what belonged to the parent (handles), be able to start over, and the parent must go on
// unaffected.
#include <cufile.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/driver.hpp"
#include "fault_support.hpp"

namespace fault {
namespace {

constexpr size_t kSize = (9u << 20) + 123;  // several chunks: runs on the workers

// Exit codes of the child, so the parent can say what went wrong.
enum ChildExit { kOk = 0, kOldHandleNotRefused = 2, kRegisterFailed = 3, kReadWrong = 4 };

// With a real CUDA driver loaded in the parent, CUDA itself refuses to work in the child, so
// there the new session may fail to open: that must be a clean error, not a hang. Host-only
// (as in CI), the child must be able to start over completely.
int child(int fd, CUfileHandle_t inherited, const std::vector<char>& want) {
  alarm(20);  // a hang ends the child with SIGALRM, which the parent reports
  const bool cuda_loaded = gpufile::cuda::driver() != nullptr;
  std::vector<char> got(want.size());
  ssize_t n = cuFileRead(inherited, got.data(), got.size(), 0, 0);
  if (n != -1 || (errno != CU_FILE_HANDLE_NOT_REGISTERED && !cuda_loaded))
    return kOldHandleNotRefused;
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  if (cuFileHandleRegister(&h, &d).err != CU_FILE_SUCCESS) return cuda_loaded ? kOk : kRegisterFailed;
  n = cuFileRead(h, got.data(), got.size(), 0, 0);
  if (cuda_loaded && n == -1) return kOk;
  if (n != static_cast<ssize_t>(want.size()) || got != want) return kReadWrong;
  return kOk;
}

TEST(Fork, ChildStartsOverAndParentGoesOn) {
  Watchdog dog(std::chrono::seconds(60));
  char path[] = "/tmp/gpufile-fork-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::vector<char> data(kSize);
  std::mt19937_64 rng(seed());
  for (char& c : data) c = static_cast<char>(rng());
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));

  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  ASSERT_EQ(cuFileHandleRegister(&h, &d).err, CU_FILE_SUCCESS);
  std::vector<char> got(kSize);
  ASSERT_EQ(cuFileRead(h, got.data(), got.size(), 0, 0), static_cast<ssize_t>(kSize));

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child(fd, h, data));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "child ended by signal " << WTERMSIG(status)
                                 << (WTERMSIG(status) == SIGALRM ? " (it hung)" : "");
  EXPECT_EQ(WEXITSTATUS(status), kOk) << "see ChildExit in test_fork.cpp";

  std::fill(got.begin(), got.end(), 0);
  EXPECT_EQ(cuFileRead(h, got.data(), got.size(), 0, 0), static_cast<ssize_t>(kSize));
  EXPECT_TRUE(got == data) << "the parent's read after fork is wrong";
  cuFileHandleDeregister(h);
  cuFileDriverClose();
  close(fd);
  unlink(path);
}

}  // namespace
}  // namespace fault
