// io_uring unavailable (matrix rows 23, 24): seccomp profiles (Docker's default) and
// kernel.io_uring_disabled make io_uring_setup fail with ENOSYS or EPERM. With the default
// engine policy the library must fall back to the posix engine, say why, and work; when
// io_uring is demanded (GPUFILE_ENGINE=io_uring) the driver open must fail instead.
//
// Method: FaultyOs fails uring_init before cuFileDriverOpen. The same check through the real
// kernel path (a seccomp filter) is no_uring_runner + the `gpufile demo` CTest.
#include "exec/runtime.hpp"
#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::Runtime;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

class UringUnavailable : public FaultTest, public ::testing::WithParamInterface<int> {
 protected:
  UringUnavailable() { engine = "auto"; }
  void before_open() override {
    id = faults.add({.op = FaultOp::uring_init, .times = FaultRule::persistent,
                     .err = GetParam()});
  }
  size_t id = 0;
};

TEST_P(UringUnavailable, FallsBackToPosixAndSaysWhy) {
  EXPECT_GT(faults.fired(id), 0u);
  EXPECT_EQ(Runtime::instance().engine_name(), "posix");
  const std::string note = Runtime::instance().engine_note();
  EXPECT_NE(note.find(GetParam() == EPERM ? "not permitted" : "no io_uring"), std::string::npos)
      << note;
  EXPECT_NE(note.find("posix"), std::string::npos) << note;
  for (uint64_t size : {40000ull, (9ull << 20) + 123}) {
    SCOPED_TRACE(size);
    GuardedBuffer b(size, 1000);
    expect_read_exact(b, 1000, size);
    expect_write_exact(b, 1000, size);
  }
}

TEST_P(UringUnavailable, DemandingIoUringFailsTheOpen) {
  cuFileDriverClose();
  driver_open = false;
  fh = nullptr;  // went with the session
  setenv("GPUFILE_ENGINE", "io_uring", 1);
  EXPECT_NE(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  EXPECT_FALSE(Runtime::instance().is_open());
  // Nothing is left half open: with io_uring back, the driver opens normally.
  faults.clear();
  unsetenv("GPUFILE_ENGINE");
  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  driver_open = true;
}

INSTANTIATE_TEST_SUITE_P(Matrix, UringUnavailable, ::testing::Values(EPERM, ENOSYS),
                         [](const auto& info) { return info.param == EPERM ? "EPERM" : "ENOSYS"; });

}  // namespace
}  // namespace fault
