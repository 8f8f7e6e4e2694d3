// Admission of batch entries: each entry's handle must still name the file it was registered
// with (a closed descriptor whose number was reused for another file is refused with EBADF).
// One fstat per handle per submission checks that for all of its entries: they are admitted at
// the same moment.
#include "fault_support.hpp"

#include <fcntl.h>

namespace fault {
namespace {

using gpufile::sys::FaultOp;

class BatchAdmission : public FaultTest {
 protected:
  CUfileIOParams_t entry(CUfileHandle_t h, GuardedBuffer& b, uint64_t file_off, uint64_t buf_off,
                         size_t len, unsigned cookie) {
    CUfileIOParams_t p{};
    p.mode = CUFILE_BATCH;
    p.opcode = CUFILE_READ;
    p.fh = h;
    p.u.batch = {b.data(), static_cast<off_t>(file_off), static_cast<off_t>(buf_off), len};
    p.cookie = reinterpret_cast<void*>(static_cast<uintptr_t>(cookie));
    return p;
  }
  // Submits `io` and reaps every event; the submission's error code.
  CUfileOpError submit_and_reap(std::vector<CUfileIOParams_t>& io, unsigned* completed) {
    CUfileBatchHandle_t b = nullptr;
    EXPECT_EQ(cuFileBatchIOSetUp(&b, static_cast<unsigned>(io.size())).err, CU_FILE_SUCCESS);
    CUfileOpError e = cuFileBatchIOSubmit(b, static_cast<unsigned>(io.size()), io.data(), 0).err;
    *completed = 0;
    if (e == CU_FILE_SUCCESS) {
      std::vector<CUfileIOEvents_t> ev(io.size());
      unsigned got = 0;
      while (got < io.size()) {
        unsigned nr = static_cast<unsigned>(io.size()) - got;
        EXPECT_EQ(cuFileBatchIOGetStatus(b, nr, &nr, ev.data() + got, nullptr).err, CU_FILE_SUCCESS);
        got += nr;
      }
      for (const CUfileIOEvents_t& x : ev) *completed += x.status == CUFILE_COMPLETE;
    }
    cuFileBatchIODestroy(b);
    return e;
  }
  // A second descriptor and handle of the same file.
  void register_second_handle(int* fd, CUfileHandle_t* fh) {
    *fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(*fd, 0);
    CUfileDescr_t d{};
    d.handle.fd = *fd;
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    ASSERT_EQ(cuFileHandleRegister(fh, &d).err, CU_FILE_SUCCESS);
  }
};

TEST_F(BatchAdmission, OneFstatPerHandlePerSubmission) {
  int fd2 = -1;
  CUfileHandle_t fh2 = nullptr;
  ASSERT_NO_FATAL_FAILURE(register_second_handle(&fd2, &fh2));
  GuardedBuffer buf(64 * 4096, 0);
  std::vector<CUfileIOParams_t> io;
  for (unsigned i = 0; i < 64; ++i)
    io.push_back(entry(i % 2 ? fh2 : fh, buf, i * 8192, i * 4096, 4096, i));
  // A rule that only counts: a delay of 0 on every fstat.
  const size_t counted = faults.add({.op = FaultOp::fstat,
                                     .times = gpufile::sys::FaultRule::persistent,
                                     .action = gpufile::sys::FaultAction::delay});
  unsigned completed = 0;
  EXPECT_EQ(submit_and_reap(io, &completed), CU_FILE_SUCCESS);
  EXPECT_EQ(completed, 64u);
  EXPECT_EQ(faults.seen(counted), 2u) << "one fstat per handle, not per entry";
  for (unsigned i = 0; i < 64; ++i)
    EXPECT_EQ(first_mismatch(buf.data() + i * 4096, shadow.data() + i * 8192, 4096), SIZE_MAX) << i;
  EXPECT_TRUE(buf.guards_intact());
  cuFileHandleDeregister(fh2);
  ::close(fd2);
}

TEST_F(BatchAdmission, AReusedDescriptorRefusesTheWholeSubmission) {
  // The second handle's descriptor is closed and its number given to another file.
  int fd2 = -1;
  CUfileHandle_t fh2 = nullptr;
  ASSERT_NO_FATAL_FAILURE(register_second_handle(&fd2, &fh2));
  ::close(fd2);
  const std::string other = dir + "/other";
  int reused = ::open(other.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_EQ(reused, fd2) << "the lowest free descriptor number is taken again";
  GuardedBuffer buf(8 * 4096, 0);
  std::vector<CUfileIOParams_t> io;
  for (unsigned i = 0; i < 8; ++i) io.push_back(entry(i == 5 ? fh2 : fh, buf, i * 4096, i * 4096, 4096, i));
  unsigned completed = 0;
  EXPECT_NE(submit_and_reap(io, &completed), CU_FILE_SUCCESS);
  EXPECT_EQ(completed, 0u);
  for (size_t k = 0; k < buf.size(); ++k)
    ASSERT_EQ(static_cast<unsigned char>(buf.data()[k]), GuardedBuffer::kSentinel) << "byte " << k;
  cuFileHandleDeregister(fh2);
  ::close(reused);
  ::unlink(other.c_str());
}

}  // namespace
}  // namespace fault
