// fork() after the library started (matrix row 36): the child inherits the session but none of
// its IO workers, so an IO through it would wait for ever. The child must get clear errors for
// what belonged to the parent (handles), be able to start over, and the parent must go on
// unaffected.
//
// A fork also copies every lock as it is at that instant: a worker inside malloc or free, or
// still starting up, would leave the allocator's lock held in the child, which then hangs in
// its first malloc of that size (seen under ASan, whose allocator does not lock around fork).
// Runtime parks the workers around fork() (src/exec/executor.hpp); the tests below fork at
// every phase of a transfer, right after an open, from a completion callback and with the
// driver closed. No other thread of a test allocates while it forks (other threads of a test
// that malloc while it forks would hang an ASan child on their own): the watchdog's thread is
// through its start-up before its constructor returns, and a fork from a completion callback
// waits until the test's thread is done submitting. A child that hangs all the same is not
// just killed: the parent prints its threads' stacks first (expect_child_ok).
#include <cufile.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/driver.hpp"
#include "exec/runtime.hpp"
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
  // A hang ends the child with SIGALRM should its parent be gone; the parent gives up on it
  // sooner (kChildLimit), with its stacks.
  alarm(60);
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

// A scratch file of `size` bytes (random when rng is given, else zero), removed at the end.
struct Scratch {
  char path[32] = "/tmp/gpufile-fork-XXXXXX";
  int fd = -1;
  std::vector<char> data;
  Scratch(size_t size, std::mt19937_64* rng) : data(size) {
    fd = mkstemp(path);
    if (rng)
      for (char& c : data) c = static_cast<char>((*rng)());
    if (fd >= 0 && pwrite(fd, data.data(), size, 0) != static_cast<ssize_t>(size)) {
      close(fd);
      fd = -1;
    }
  }
  ~Scratch() {
    if (fd >= 0) close(fd);
    unlink(path);
  }
};

CUfileHandle_t register_fd(int fd) {
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  EXPECT_EQ(cuFileHandleRegister(&h, &d).err, CU_FILE_SUCCESS);
  return h;
}

// Waits for a child running child() and checks how it ended. A child still running after
// kChildLimit is hung: its threads' stacks are printed (gdb, where installed) before it is
// killed, so that a hang in CI carries its own diagnosis. This also catches a child stuck before
// it reaches its alarm() (in fork()'s own handlers), which the alarm cannot end.
constexpr auto kChildLimit = std::chrono::seconds(20);

void expect_child_ok(pid_t pid) {
  ASSERT_GT(pid, 0);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kChildLimit;
  pid_t r;
  while ((r = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (r == 0) {
    test_support::dump_stacks(pid, "the hung child");
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the child still ran after " << kChildLimit.count()
           << " s: a hang (its stacks are printed above)";
  }
  ASSERT_EQ(r, pid);
  EXPECT_TRUE(WIFEXITED(status)) << "child ended by signal " << WTERMSIG(status)
                                 << (WTERMSIG(status) == SIGALRM ? " (it hung)" : "");
  EXPECT_EQ(WEXITSTATUS(status), kOk) << "see ChildExit in test_fork.cpp";
}

// One scratch file of random bytes, registered with an open driver: where most fork tests start.
class ForkOneFile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(in.fd, 0);
    ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
    h = register_fd(in.fd);
  }

  Watchdog dog{std::chrono::seconds(60)};
  std::mt19937_64 rng{seed()};
  Scratch in{kSize, &rng};
  CUfileHandle_t h = nullptr;
};

TEST_F(ForkOneFile, ChildStartsOverAndParentGoesOn) {
  std::vector<char> got(kSize);
  ASSERT_EQ(cuFileRead(h, got.data(), got.size(), 0, 0), static_cast<ssize_t>(kSize));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child(in.fd, h, in.data));
  ASSERT_NO_FATAL_FAILURE(expect_child_ok(pid));
  std::fill(got.begin(), got.end(), 0);
  EXPECT_EQ(cuFileRead(h, got.data(), got.size(), 0, 0), static_cast<ssize_t>(kSize));
  EXPECT_TRUE(got == in.data) << "the parent's read after fork is wrong";
  cuFileHandleDeregister(h);
  cuFileDriverClose();
}

// Forks while batches of reads and writes run on the workers: at a random point of each (queued,
// in the kernel, in the completion callbacks that free the entries, or done), and every few
// rounds right after the driver opened, while its worker threads may still be starting. Each
// child must start over cleanly, and each batch must end with the right bytes in the parent.
TEST(Fork, RepeatedlyWhileTransfersRun) {
  constexpr int kRounds = 12;
  Watchdog dog(std::chrono::seconds(300));
  std::mt19937_64 rng(seed());
  Scratch in(kSize, &rng), out(kSize, nullptr);
  ASSERT_GE(in.fd, 0);
  ASSERT_GE(out.fd, 0);
  std::vector<char> r1(kSize), r2(kSize), w(kSize), back(kSize);
  const size_t half = kSize / 2;
  CUfileHandle_t hin = nullptr, hout = nullptr;
  auto open = [&] {
    ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
    hin = register_fd(in.fd);
    hout = register_fd(out.fd);
  };
  auto close_driver = [&] {
    cuFileHandleDeregister(hin);
    cuFileHandleDeregister(hout);
    ASSERT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
  };
  ASSERT_NO_FATAL_FAILURE(open());
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round % 4 == 3) {
      ASSERT_NO_FATAL_FAILURE(close_driver());
      ASSERT_NO_FATAL_FAILURE(open());
      pid_t pid = fork();
      if (pid == 0) _exit(child(in.fd, hin, in.data));
      ASSERT_NO_FATAL_FAILURE(expect_child_ok(pid));
    }
    for (char& c : w) c = static_cast<char>(rng());
    std::fill(r1.begin(), r1.end(), 0);
    std::fill(r2.begin(), r2.end(), 0);
    CUfileIOParams_t io[4] = {};
    auto entry = [&](CUfileIOParams_t& p, CUfileHandle_t h, CUfileOpcode_t op, char* mem,
                     off_t off, size_t size) {
      p.mode = CUFILE_BATCH;
      p.fh = h;
      p.opcode = op;
      p.cookie = &p;
      p.u.batch.devPtr_base = mem;
      p.u.batch.file_offset = off;
      p.u.batch.size = size;
    };
    entry(io[0], hin, CUFILE_READ, r1.data(), 0, kSize);
    entry(io[1], hin, CUFILE_READ, r2.data(), half, kSize - half);
    entry(io[2], hout, CUFILE_WRITE, w.data(), 0, half);
    entry(io[3], hout, CUFILE_WRITE, w.data() + half, half, kSize - half);
    CUfileBatchHandle_t b = nullptr;
    ASSERT_EQ(cuFileBatchIOSetUp(&b, 4).err, CU_FILE_SUCCESS);
    ASSERT_EQ(cuFileBatchIOSubmit(b, 4, io, 0).err, CU_FILE_SUCCESS);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 8000));
    pid_t pid = fork();
    if (pid == 0) _exit(child(in.fd, hin, in.data));
    ASSERT_NO_FATAL_FAILURE(expect_child_ok(pid));

    CUfileIOEvents_t ev[4];
    unsigned got = 0;
    while (got < 4) {
      unsigned nr = 4 - got;
      timespec t{60, 0};
      ASSERT_EQ(cuFileBatchIOGetStatus(b, nr, &nr, ev + got, &t).err, CU_FILE_SUCCESS);
      ASSERT_GT(nr, 0u) << "the parent's batch did not finish";
      got += nr;
    }
    for (const CUfileIOEvents_t& e : ev) {
      const auto* p = static_cast<const CUfileIOParams_t*>(e.cookie);
      EXPECT_EQ(e.status, CUFILE_COMPLETE) << "entry " << (p - io);
      EXPECT_EQ(e.ret, p->u.batch.size) << "entry " << (p - io);
    }
    cuFileBatchIODestroy(b);
    EXPECT_TRUE(r1 == in.data) << "the parent's read during fork is wrong";
    EXPECT_TRUE(std::equal(r2.begin(), r2.begin() + (kSize - half), in.data.begin() + half))
        << "the parent's read during fork is wrong";
    ASSERT_EQ(pread(out.fd, back.data(), kSize, 0), static_cast<ssize_t>(kSize));
    EXPECT_TRUE(back == w) << "the parent's write during fork is wrong";
  }
  ASSERT_NO_FATAL_FAILURE(close_driver());
}

// A fork from a completion callback, on an IO worker, while the other workers move another
// read: the forking worker must not wait for itself to park.
TEST_F(ForkOneFile, FromACompletionCallback) {
  gpufile::Runtime& rt = gpufile::Runtime::instance();
  std::vector<char> a(kSize), b(kSize);
  std::unique_ptr<gpufile::Io> busy, forking;
  ASSERT_FALSE(rt.prepare(gpufile::sys::IoKind::read, h, a.data(), kSize, 0, 0, &forking));
  ASSERT_FALSE(rt.prepare(gpufile::sys::IoKind::read, h, b.data(), kSize, 0, 0, &busy));
  std::atomic<pid_t> pid{0};
  // The test's own thread allocates while it submits (the executor's list of jobs): the
  // callback forks only once it waits, allocating nothing (see the top of this file; the
  // library parks its workers, not its callers' threads).
  std::atomic<bool> submitted{false};
  forking->job.on_complete = [&](gpufile::exec::Job&) {
    submitted.wait(false);
    pid_t p = fork();
    if (p == 0) _exit(child(in.fd, h, in.data));
    pid.store(p < 0 ? -1 : p);
    pid.notify_all();
  };
  rt.submit(*forking);
  rt.submit(*busy);
  submitted.store(true);
  submitted.notify_all();
  pid.wait(0);
  ASSERT_NO_FATAL_FAILURE(expect_child_ok(pid.load()));
  busy->job.wait();
  gpufile::IoResult r = busy->job.result();
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.bytes, kSize);
  r = forking->job.result();
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.bytes, kSize);
  EXPECT_TRUE(a == in.data);
  EXPECT_TRUE(b == in.data);
  busy.reset();
  forking.reset();
  cuFileHandleDeregister(h);
  EXPECT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
}

// With the driver closed (its workers joined) the child starts over all the same, and so does
// the parent.
TEST_F(ForkOneFile, WhileTheDriverIsClosed) {
  std::vector<char> got(kSize);
  ASSERT_EQ(cuFileRead(h, got.data(), kSize, 0, 0), static_cast<ssize_t>(kSize));
  ASSERT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
  pid_t pid = fork();
  if (pid == 0) _exit(child(in.fd, h, in.data));
  ASSERT_NO_FATAL_FAILURE(expect_child_ok(pid));
  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  h = register_fd(in.fd);
  std::fill(got.begin(), got.end(), 0);
  EXPECT_EQ(cuFileRead(h, got.data(), kSize, 0, 0), static_cast<ssize_t>(kSize));
  EXPECT_TRUE(got == in.data);
  cuFileHandleDeregister(h);
  EXPECT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
}

}  // namespace
}  // namespace fault
