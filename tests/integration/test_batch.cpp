// Suite 3: the batch API (cuFileBatchIO*, spec §3.8).
#include <cinttypes>
#include <map>
#include <set>
#include <thread>

#include "common.hpp"
#include "core/stats.hpp"

namespace capi_test {
namespace {

// Batch entry i (its cookie is i + 1, so a cookie names the entry).
CUfileIOParams_t entry(CUfileHandle_t fh, CUfileOpcode_t op, void* base, off_t file_offset,
                       off_t buf_offset, size_t size, unsigned i) {
  CUfileIOParams_t p{};
  p.mode = CUFILE_BATCH;
  p.u.batch.devPtr_base = base;
  p.u.batch.file_offset = file_offset;
  p.u.batch.devPtr_offset = buf_offset;
  p.u.batch.size = size;
  p.fh = fh;
  p.opcode = op;
  p.cookie = reinterpret_cast<void*>(uintptr_t(i + 1));
  return p;
}


constexpr size_t KiB = 1024, MiB = 1024 * 1024;
constexpr uint64_t kFileSize = 24 * MiB;

timespec ms(long v) { return timespec{v / 1000, (v % 1000) * 1000000L}; }

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One planned batch entry and what it should produce.
struct Planned {
  int file;
  bool write;
  uint64_t foff;
  size_t size;
  size_t boff;
  size_t expect;  // bytes: size, or the short count at end of file
  void* cookie;
  std::vector<uint8_t> data;  // what a write writes
};

class BatchTest : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    session_ = std::make_unique<DriverSession>();
    ASSERT_TRUE(session_->ok()) << session_->error();
    seed_ = test_seed();
    rng_ = std::make_unique<Rng>(seed_);
    const bool direct = direct_io_works(dir_.path());
    for (int f = 0; f < 2; ++f) {
      paths_[f] = dir_.file("batch" + std::to_string(f) + ".bin");
      shadow_[f] = rng_->bytes(kFileSize);
      ASSERT_NO_FATAL_FAILURE(write_file(paths_[f], shadow_[f].data(), kFileSize));
      // One file through a buffered fd, the other through O_DIRECT.
      handles_[f] = Handle(paths_[f], O_RDWR | (f == 1 && direct ? O_DIRECT : 0));
      ASSERT_TRUE(handles_[f].ok()) << handles_[f].status().err;
    }
  }
  void TearDown() override {
    handles_[0].reset();
    handles_[1].reset();
    session_.reset();
    CapiTest::TearDown();
  }

  // Mixed reads and writes over both files, with disjoint file and buffer ranges, one entry
  // straddling end of file and `zero_entries` entries of size 0 at the end.
  std::vector<Planned> plan(unsigned n, size_t* buf_bytes, int zero_entries = 1) {
    static const size_t sizes[] = {4096, 1, 65537, 1 * MiB + 3, 4 * MiB + 1, 300000, 511, 2 * MiB, 64 * KiB, 13};
    std::vector<Planned> v;
    uint64_t fcur[2] = {0, 0};
    size_t bcur = 0;
    for (unsigned i = 0; i < n; ++i) {
      Planned p{};
      p.file = static_cast<int>(i % 2);
      p.write = (i / 2) % 2 == 1;
      p.size = sizes[i % std::size(sizes)];
      p.foff = fcur[p.file] + (i * 7919u) % 4096;
      p.boff = bcur + (i * 104729u) % 4096;
      p.expect = p.size;
      p.cookie = reinterpret_cast<void*>(static_cast<uintptr_t>(0xC00C1E00 + i));
      fcur[p.file] = p.foff + p.size + 100;
      bcur = p.boff + p.size + 100;
      v.push_back(std::move(p));
    }
    // A read straddling end of file: the short count.
    if (!v.empty()) {
      Planned& last = v.back();
      last.write = false;
      last.file = 0;
      last.size = 5000;
      last.foff = kFileSize - 1000;
      last.expect = 1000;
      EXPECT_LT(fcur[0], kFileSize - 1000) << "plan too large for the file";
    }
    for (int z = 0; z < zero_entries; ++z) {
      Planned p{};
      p.file = z % 2;
      p.write = z % 2 == 1;
      p.foff = 4096;
      p.size = p.expect = 0;
      p.boff = 0;
      p.cookie = reinterpret_cast<void*>(static_cast<uintptr_t>(0x2E50 + z));
      v.push_back(std::move(p));
    }
    *buf_bytes = bcur + 8192;
    return v;
  }

  // A plan of `n` entries (plan()) and a buffer of `kind` for it; null where this machine has
  // no such memory.
  std::unique_ptr<Buffer> planned(Mem kind, unsigned n, std::vector<Planned>* p) {
    size_t bytes = 0;
    *p = plan(n, &bytes);
    std::string why;
    return Buffer::make(kind, bytes, &why);
  }

  // Fills write sources; returns the IO params.
  std::vector<CUfileIOParams_t> params(std::vector<Planned>& plan, Buffer& buf) {
    std::vector<CUfileIOParams_t> io;
    for (Planned& p : plan) {
      if (p.write) {
        p.data = rng_->bytes(p.size);
        buf.upload(p.boff, p.data.data(), p.size);
      }
      CUfileIOParams_t e{};
      e.mode = CUFILE_BATCH;
      e.u.batch.devPtr_base = buf.ptr();
      e.u.batch.file_offset = static_cast<off_t>(p.foff);
      e.u.batch.devPtr_offset = static_cast<off_t>(p.boff);
      e.u.batch.size = p.size;
      e.fh = handles_[p.file].get();
      e.opcode = p.write ? CUFILE_WRITE : CUFILE_READ;
      e.cookie = p.cookie;
      io.push_back(e);
    }
    return io;
  }

  // Reaps until every entry with a size has reported once, checking each event.
  void reap_all(CUfileBatchHandle_t b, unsigned capacity, const std::vector<Planned>& plan,
                std::map<void*, CUfileIOEvents_t>* seen, double limit_s = 60) {
    std::map<void*, const Planned*> by_cookie;
    size_t expected = 0;
    for (const Planned& p : plan) {
      by_cookie[p.cookie] = &p;
      expected += p.size > 0;
    }
    std::vector<CUfileIOEvents_t> ev(capacity);
    auto t0 = std::chrono::steady_clock::now();
    for (unsigned round = 0; seen->size() < expected; ++round) {
      ASSERT_LT(since(t0), limit_s) << "batch did not complete: " << seen->size() << " of " << expected;
      unsigned nr = 1 + round % capacity;  // vary the room we give
      timespec t = ms(100);
      CUfileError_t st = cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t);
      ASSERT_EQ(st.err, CU_FILE_SUCCESS);
      ASSERT_LE(nr, 1 + round % capacity);
      for (unsigned i = 0; i < nr; ++i) {
        auto it = by_cookie.find(ev[i].cookie);
        ASSERT_NE(it, by_cookie.end()) << "unknown cookie " << ev[i].cookie;
        ASSERT_GT(it->second->size, 0u) << "a size-0 entry produced an event";
        ASSERT_TRUE(seen->emplace(ev[i].cookie, ev[i]).second) << "cookie reported twice " << ev[i].cookie;
      }
    }
  }

  // Checks the results of a completed plan: statuses, counts, buffer and file contents.
  void verify(const std::vector<Planned>& plan, const std::map<void*, CUfileIOEvents_t>& seen, Buffer& buf) {
    for (const Planned& p : plan) {
      if (p.size == 0) continue;
      char what[160];
      snprintf(what, sizeof what, "[seed=%" PRIu64 " %s file%d off=%" PRIu64 " size=%zu buf_off=%zu %s]", seed_,
               p.write ? "write" : "read", p.file, p.foff, p.size, p.boff, mem_name(buf.kind()));
      auto it = seen.find(p.cookie);
      ASSERT_NE(it, seen.end()) << what;
      EXPECT_EQ(it->second.status, CUFILE_COMPLETE) << what;
      EXPECT_EQ(it->second.ret, p.expect) << what << " ret as signed " << static_cast<ssize_t>(it->second.ret);
      if (p.write) {
        std::memcpy(shadow_[p.file].data() + p.foff, p.data.data(), p.size);
      } else {
        std::vector<uint8_t> got = buf.read_back(p.boff, p.expect);
        ASSERT_EQ(first_mismatch(got.data(), shadow_[p.file].data() + p.foff, p.expect), "") << what;
      }
    }
    for (int f = 0; f < 2; ++f) {
      std::vector<uint8_t> file = read_file(paths_[f], 0, kFileSize);
      ASSERT_EQ(first_mismatch(file.data(), shadow_[f].data(), kFileSize), "") << "file " << f;
    }
  }

  TempDir dir_;
  std::unique_ptr<DriverSession> session_;
  uint64_t seed_ = 0;
  std::unique_ptr<Rng> rng_;
  std::string paths_[2];
  std::vector<uint8_t> shadow_[2];
  Handle handles_[2];
};

TEST_F(BatchTest, SetUpLimits) {
  CUfileBatchHandle_t b = nullptr;
  EXPECT_EQ(cuFileBatchIOSetUp(&b, 0).err, CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileBatchIOSetUp(&b, 129).err, CU_FILE_INVALID_VALUE) << "default io_batchsize is 128";
  EXPECT_EQ(cuFileBatchIOSetUp(&b, 1024).err, CU_FILE_INVALID_VALUE);
  EXPECT_EQ(cuFileBatchIOSetUp(nullptr, 4).err, CU_FILE_INVALID_VALUE);
  ASSERT_EQ(cuFileBatchIOSetUp(&b, 128).err, CU_FILE_SUCCESS);
  cuFileBatchIODestroy(b);
  ASSERT_EQ(cuFileBatchIOSetUp(&b, 1).err, CU_FILE_SUCCESS);
  cuFileBatchIODestroy(b);
}

// Mixed reads and writes over two files with cookies, reaped with varying room; out-of-order
// completion allowed; every byte checked; the size-0 entry never reports.
TEST_F(BatchTest, MixedReadsAndWritesEveryMemoryKind) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "MixedReadsAndWritesEveryMemoryKind");
  for (Mem kind : kAllMem) {
    SCOPED_TRACE(mem_name(kind));
    std::vector<Planned> p;
    auto buf = planned(kind, 24, &p);
    if (!buf) continue;
    const bool reg = kind == Mem::device || kind == Mem::pinned;
    if (reg) {
      ASSERT_EQ(cuFileBufRegister(buf->ptr(), buf->size(), 0).err, CU_FILE_SUCCESS);
    }
    std::vector<CUfileIOParams_t> io = params(p, *buf);
    CUfileBatchHandle_t b = nullptr;
    ASSERT_EQ(cuFileBatchIOSetUp(&b, static_cast<unsigned>(io.size())).err, CU_FILE_SUCCESS);
    ASSERT_EQ(cuFileBatchIOSubmit(b, static_cast<unsigned>(io.size()), io.data(), 0).err, CU_FILE_SUCCESS);
    std::map<void*, CUfileIOEvents_t> seen;
    ASSERT_NO_FATAL_FAILURE(reap_all(b, static_cast<unsigned>(io.size()), p, &seen));
    // Nothing more comes, the size-0 entry included.
    std::vector<CUfileIOEvents_t> ev(io.size());
    unsigned nr = static_cast<unsigned>(io.size());
    timespec t = ms(50);
    EXPECT_EQ(cuFileBatchIOGetStatus(b, 0, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
    EXPECT_EQ(nr, 0u);
    ASSERT_NO_FATAL_FAILURE(verify(p, seen, *buf));
    cuFileBatchIODestroy(b);
    if (reg) {
      EXPECT_EQ(cuFileBufDeregister(buf->ptr()).err, CU_FILE_SUCCESS);
    }
  }
}

// The thread that set a batch up and submitted it exits with its entries in flight (a worker
// thread of the program done with its part): another thread reaps every entry, each byte
// checked, and destroys the batch. Into GPU memory, the test double's slowed copies keep the
// entries running past the thread's exit.
TEST_F(BatchTest, SubmittingThreadExitsWithItsBatchInFlight) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "SubmittingThreadExitsWithItsBatchInFlight");
  const FakeControls fake = fake_controls();
  for (Mem kind : kAllMem) {
    SCOPED_TRACE(mem_name(kind));
    std::vector<Planned> p;
    auto buf = planned(kind, 24, &p);
    if (!buf) continue;
    std::vector<CUfileIOParams_t> io = params(p, *buf);
    if (fake.set_async_delay_us) fake.set_async_delay_us(2000);
    CUfileBatchHandle_t b = nullptr;
    CUfileError_t setup{}, submit{};
    std::thread submitter([&] {
      bind_context();
      setup = cuFileBatchIOSetUp(&b, static_cast<unsigned>(io.size()));
      if (setup.err == CU_FILE_SUCCESS)
        submit = cuFileBatchIOSubmit(b, static_cast<unsigned>(io.size()), io.data(), 0);
    });
    submitter.join();
    if (fake.set_async_delay_us) fake.set_async_delay_us(0);
    ASSERT_EQ(setup.err, CU_FILE_SUCCESS);
    ASSERT_EQ(submit.err, CU_FILE_SUCCESS);
    std::map<void*, CUfileIOEvents_t> seen;
    ASSERT_NO_FATAL_FAILURE(reap_all(b, static_cast<unsigned>(io.size()), p, &seen));
    ASSERT_NO_FATAL_FAILURE(verify(p, seen, *buf));
    cuFileBatchIODestroy(b);
  }
}

// Each batch entry counts as a completion (L1), is timed from its submission (level 2) and
// counted under the GPU of its buffer (level 3).
TEST_F(BatchTest, EntriesAreTimedAndCountedPerDevice) {
  CAPI_REQUIRE_DRIVER();  // device memory and its GPU's row
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  ASSERT_EQ(cuFileSetStatsLevel(3).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileStatsReset().err, CU_FILE_SUCCESS);
  size_t bytes = 0;
  std::vector<Planned> p = plan(6, &bytes);
  std::string why;
  auto buf = Buffer::make(Mem::device, bytes, &why);
  ASSERT_TRUE(buf) << why;
  std::vector<CUfileIOParams_t> io = params(p, *buf);
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, static_cast<unsigned>(io.size())).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileBatchIOSubmit(b, static_cast<unsigned>(io.size()), io.data(), 0).err, CU_FILE_SUCCESS);
  std::map<void*, CUfileIOEvents_t> seen;
  ASSERT_NO_FATAL_FAILURE(reap_all(b, static_cast<unsigned>(io.size()), p, &seen));
  cuFileBatchIODestroy(b);

  uint64_t entries[2] = {}, moved[2] = {};
  for (const Planned& e : p) {
    if (e.size == 0) continue;  // no event, not counted
    ++entries[e.write];
    moved[e.write] += e.expect;
  }
  CUfileStatsLevel1_t l1{};
  ASSERT_EQ(cuFileGetStatsL1(&l1).err, CU_FILE_SUCCESS);
  EXPECT_EQ(l1.batch_complete_ops.ok, entries[0] + entries[1]);
  EXPECT_EQ(l1.batch_read_bytes, moved[0]);
  EXPECT_EQ(l1.batch_write_bytes, moved[1]);
  const gpufile::stats::Snapshot s = gpufile::stats::snapshot();
  for (int op = 0; op < 2; ++op) {
    uint64_t timed[gpufile::stats::kLatencyBuckets] = {};
    gpufile::stats::add_latency(s, static_cast<gpufile::stats::Op>(op), timed);
    uint64_t n = 0;
    for (uint64_t c : timed) n += c;
    EXPECT_EQ(n, entries[op]) << (op ? "writes" : "reads");
    EXPECT_EQ(s.devices[0][op].calls.ok, entries[op]);
    EXPECT_EQ(s.devices[0][op].bytes, moved[op]);
  }
  CUfileStatsLevel3_t l3{};
  ASSERT_EQ(cuFileGetStatsL3(&l3).err, CU_FILE_SUCCESS);
  EXPECT_EQ(l3.per_gpu_stats[0].n_total_reads, entries[0]);
  EXPECT_EQ(l3.per_gpu_stats[0].writes_bytes, moved[1]);
  ASSERT_EQ(cuFileSetStatsLevel(0).err, CU_FILE_SUCCESS);
}

// min_nr == every entry with a long timeout returns them all in one call; a batch can be
// submitted again once reaped.
TEST_F(BatchTest, MinNrWaitsForAll) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(60), "MinNrWaitsForAll");
  size_t bytes = 0;
  std::vector<Planned> p = plan(12, &bytes, 0);
  std::string why;
  auto buf = Buffer::make(has_driver() ? Mem::device : Mem::pageable, bytes, &why);
  ASSERT_TRUE(buf) << why;
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, 16).err, CU_FILE_SUCCESS);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<CUfileIOParams_t> io = params(p, *buf);
    ASSERT_EQ(cuFileBatchIOSubmit(b, 12, io.data(), 0).err, CU_FILE_SUCCESS);
    std::vector<CUfileIOEvents_t> ev(16);
    unsigned nr = 16;
    timespec t = ms(30000);
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 12, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
    EXPECT_LT(since(t0), 25.0);
    ASSERT_EQ(nr, 12u) << "min_nr=12 must wait for all twelve";
    std::map<void*, CUfileIOEvents_t> seen;
    for (unsigned i = 0; i < nr; ++i) seen.emplace(ev[i].cookie, ev[i]);
    ASSERT_NO_FATAL_FAILURE(verify(p, seen, *buf));
  }
  // Nothing pending: a short timeout returns promptly with nothing.
  std::vector<CUfileIOEvents_t> ev(16);
  unsigned nr = 16;
  timespec t = ms(20);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
  EXPECT_EQ(nr, 0u);
  EXPECT_LT(since(t0), 5.0);
  cuFileBatchIODestroy(b);
}

// A timeout shorter than the IO: GetStatus returns in time with fewer than min_nr events.
// Needs the test double's knob that slows its stream operations.
TEST_F(BatchTest, TimeoutReturnsEarly) {
  CAPI_REQUIRE_DRIVER();
  const auto delay = fake_controls().set_async_delay_us;
  if (!delay) GTEST_SKIP() << "needs the CUDA driver test double (fakecuda_set_async_delay_us)";
  Watchdog dog(std::chrono::seconds(60), "TimeoutReturnsEarly");
  std::string why;
  auto buf = Buffer::make(Mem::device, 4 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  std::vector<CUfileIOParams_t> io(4);
  for (unsigned i = 0; i < 4; ++i) {
    io[i] = entry(handles_[0].get(), CUFILE_READ, buf->ptr(), static_cast<off_t>(i * MiB),
                  static_cast<off_t>(i * MiB), 1 * MiB, i);
  }
  delay(1000000);  // every copy waits 1 s
  AtExit undo([&] { delay(0); });
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, 4).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileBatchIOSubmit(b, 4, io.data(), 0).err, CU_FILE_SUCCESS);
  std::vector<CUfileIOEvents_t> ev(4);
  unsigned nr = 4;
  timespec t = ms(10);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cuFileBatchIOGetStatus(b, 4, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
  double took = since(t0);
  EXPECT_LT(nr, 4u) << "IO that takes 1 s cannot all be done after 10 ms";
  EXPECT_LT(took, 0.9) << "GetStatus ignored its 10 ms timeout";
  delay(0);
  unsigned got = nr;
  auto t1 = std::chrono::steady_clock::now();
  while (got < 4 && since(t1) < 30) {
    nr = 4 - got;
    timespec t2 = ms(200);
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t2).err, CU_FILE_SUCCESS);
    for (unsigned i = 0; i < nr; ++i) EXPECT_EQ(ev[i].status, CUFILE_COMPLETE);
    got += nr;
  }
  EXPECT_EQ(got, 4u);
  std::vector<uint8_t> data = buf->read_back(0, 4 * MiB);
  EXPECT_EQ(first_mismatch(data.data(), shadow_[0].data(), 4 * MiB), "");
  cuFileBatchIODestroy(b);
}

TEST_F(BatchTest, SubmitRefusals) {
  std::string why;
  auto buf = Buffer::make(Mem::pageable, 64 * KiB, &why);
  ASSERT_TRUE(buf);
  auto entry = [&](CUfileHandle_t fh, unsigned i) {
    CUfileIOParams_t e{};
    e.mode = CUFILE_BATCH;
    e.u.batch.devPtr_base = buf->ptr();
    e.u.batch.file_offset = static_cast<off_t>(i * 4096);
    e.u.batch.devPtr_offset = static_cast<off_t>(i * 4096);
    e.u.batch.size = 4096;
    e.fh = fh;
    e.opcode = CUFILE_READ;
    e.cookie = reinterpret_cast<void*>(uintptr_t(100 + i));
    return e;
  };
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, 4).err, CU_FILE_SUCCESS);
  std::vector<CUfileIOParams_t> io;
  for (unsigned i = 0; i < 5; ++i) io.push_back(entry(handles_[0].get(), i));
  EXPECT_EQ(cuFileBatchIOSubmit(b, 5, io.data(), 0).err, CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR) << "nr > capacity";

  // An entry with a handle that is not registered.
  Handle gone(paths_[0], O_RDONLY);
  ASSERT_TRUE(gone.ok());
  CUfileHandle_t stale = gone.get();
  cuFileHandleDeregister(stale);
  gone.release_handle();
  std::vector<CUfileIOParams_t> bad = {entry(handles_[0].get(), 0), entry(stale, 1)};
  EXPECT_EQ(cuFileBatchIOSubmit(b, 2, bad.data(), 0).err, CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR);
  bad[1].fh = nullptr;
  EXPECT_EQ(cuFileBatchIOSubmit(b, 2, bad.data(), 0).err, CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR) << "NULL handle";
  // No event for the refused entries.
  std::vector<CUfileIOEvents_t> ev(4);
  unsigned nr = 4;
  timespec t = ms(50);
  EXPECT_EQ(cuFileBatchIOGetStatus(b, 0, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
  for (unsigned i = 0; i < nr; ++i) EXPECT_NE(ev[i].cookie, bad[1].cookie);

  // The batch still works afterwards.
  std::vector<CUfileIOParams_t> good;
  for (unsigned i = 0; i < 4; ++i) good.push_back(entry(handles_[0].get(), i));
  ASSERT_EQ(cuFileBatchIOSubmit(b, 4, good.data(), 0).err, CU_FILE_SUCCESS);
  unsigned got = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (got < 4 && since(t0) < 30) {
    nr = 4;
    timespec t2 = ms(100);
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t2).err, CU_FILE_SUCCESS);
    got += nr;
  }
  EXPECT_GE(got, 4u);
  EXPECT_EQ(first_mismatch(buf->ptr(), shadow_[0].data(), 16384), "");
  cuFileBatchIODestroy(b);

  // Bad batch ids.
  nr = 4;
  EXPECT_EQ(cuFileBatchIOGetStatus(reinterpret_cast<CUfileBatchHandle_t>(0x5151), 0, &nr, ev.data(), &t).err,
            CU_FILE_INVALID_VALUE);
  EXPECT_NE(cuFileBatchIOSubmit(reinterpret_cast<CUfileBatchHandle_t>(0x5151), 4, good.data(), 0).err,
            CU_FILE_SUCCESS);
  cuFileBatchIODestroy(reinterpret_cast<CUfileBatchHandle_t>(0x5151));  // no crash
}

// Cancel: best effort; every event is COMPLETE (with correct data) or CANCELED, none twice;
// cancel of an idle batch succeeds.
TEST_F(BatchTest, Cancel) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(60), "Cancel");
  std::string why;
  const Mem kind = has_driver() ? Mem::device : Mem::pageable;
  const unsigned n = 64;
  auto buf = Buffer::make(kind, n * 256 * KiB, &why);
  ASSERT_TRUE(buf) << why;
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, n).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileBatchIOCancel(b).err, CU_FILE_SUCCESS) << "cancel of an idle batch";
  std::vector<CUfileIOParams_t> io(n);
  for (unsigned i = 0; i < n; ++i) {
    io[i] = entry(handles_[i % 2].get(), CUFILE_READ, buf->ptr(),
                  static_cast<off_t>(i * 256 * KiB + 3), static_cast<off_t>(i * 256 * KiB),
                  256 * KiB - 3, i);
  }
  ASSERT_EQ(cuFileBatchIOSubmit(b, n, io.data(), 0).err, CU_FILE_SUCCESS);
  EXPECT_EQ(cuFileBatchIOCancel(b).err, CU_FILE_SUCCESS);
  std::vector<CUfileIOEvents_t> ev(n);
  std::set<uintptr_t> seen;
  auto t0 = std::chrono::steady_clock::now();
  int idle_rounds = 0;
  while (seen.size() < n && idle_rounds < 5 && since(t0) < 30) {
    unsigned nr = n;
    timespec t = ms(50);
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
    idle_rounds = nr == 0 ? idle_rounds + 1 : 0;
    for (unsigned k = 0; k < nr; ++k) {
      uintptr_t c = reinterpret_cast<uintptr_t>(ev[k].cookie);
      ASSERT_TRUE(c >= 1 && c <= n) << "unknown cookie";
      ASSERT_TRUE(seen.insert(c).second) << "cookie reported twice";
      unsigned i = static_cast<unsigned>(c - 1);
      EXPECT_TRUE(ev[k].status == CUFILE_COMPLETE || ev[k].status == CUFILE_CANCELED) << ev[k].status;
      if (ev[k].status == CUFILE_COMPLETE) {
        EXPECT_EQ(ev[k].ret, 256 * KiB - 3);
        std::vector<uint8_t> got = buf->read_back(i * 256 * KiB, 256 * KiB - 3);
        EXPECT_EQ(first_mismatch(got.data(), shadow_[i % 2].data() + i * 256 * KiB + 3, 256 * KiB - 3), "")
            << "entry " << i;
      }
    }
  }
  cuFileBatchIODestroy(b);
}

// An entry that fails while it runs (the test double fails one device copy) reports
// CUFILE_FAILED; the others complete with their data.
TEST_F(BatchTest, EntryFailingAtExecutionReportsFailed) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  const auto fail = fake.fail_call;
  const auto reset = fake.reset_faults;
  if (!fail || !reset) GTEST_SKIP() << "needs the CUDA driver test double's fault controls";
  AtExit undo([&] { reset(); });
  Watchdog dog(std::chrono::seconds(60), "EntryFailingAtExecutionReportsFailed");
  std::string why;
  auto buf = Buffer::make(Mem::device, 4 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  const unsigned n = 4;
  std::vector<CUfileIOParams_t> io(n);
  for (unsigned i = 0; i < n; ++i) {
    // one chunk, one host-to-device copy each
    io[i] = entry(handles_[0].get(), CUFILE_READ, buf->ptr(), static_cast<off_t>(i * MiB + 5),
                  static_cast<off_t>(i * MiB), 1 * MiB - 5, i);
  }
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, n).err, CU_FILE_SUCCESS);
  ASSERT_EQ(fail("cuMemcpyHtoDAsync", 2, 999), 0);
  ASSERT_EQ(cuFileBatchIOSubmit(b, n, io.data(), 0).err, CU_FILE_SUCCESS);
  std::vector<CUfileIOEvents_t> ev(n);
  unsigned got = 0, failed = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (got < n && since(t0) < 30) {
    unsigned nr = n;
    timespec t = ms(100);
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
    for (unsigned k = 0; k < nr; ++k) {
      unsigned i = static_cast<unsigned>(reinterpret_cast<uintptr_t>(ev[k].cookie) - 1);
      ASSERT_LT(i, n);
      if (ev[k].status == CUFILE_FAILED) {
        ++failed;
        continue;
      }
      EXPECT_EQ(ev[k].status, CUFILE_COMPLETE);
      EXPECT_EQ(ev[k].ret, 1 * MiB - 5);
      std::vector<uint8_t> data = buf->read_back(i * MiB, 1 * MiB - 5);
      EXPECT_EQ(first_mismatch(data.data(), shadow_[0].data() + i * MiB + 5, 1 * MiB - 5), "") << "entry " << i;
    }
    got += nr;
  }
  EXPECT_EQ(got, n);
  EXPECT_EQ(failed, 1u) << "exactly the entry whose copy failed";
  cuFileBatchIODestroy(b);
}

// Cancel and destroy racing the completion of small entries, many times. (Under
// -DGPUFILE_SANITIZE=thread or address this is where a completion that frees an entry while
// cancel still walks the running list shows up.)
// Small reads into GPU memory share a worker's slab and one batched copy (Worker::kMaxPack): a
// batch of 128 reads of 1 byte to 64 KiB at unaligned offsets, through the buffered and the
// O_DIRECT file, one straddling end of file, lands every byte where it belongs, in far fewer
// copies than entries. When one batched copy fails, exactly its entries fail.
TEST_F(BatchTest, SmallReadsShareASlabAndABatchedCopy) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  Watchdog dog(std::chrono::seconds(60), "SmallReadsShareASlab");
  std::string why;
  auto buf = Buffer::make(Mem::device, 16 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  static const size_t sizes[] = {4096, 1, 512, 65536, 4095, 8192, 12345, 100};
  auto plan = [&](unsigned n, uint64_t salt) {
    std::vector<Planned> v;
    for (unsigned i = 0; i < n; ++i) {
      Planned p{};
      p.file = static_cast<int>(i % 2);
      p.size = p.expect = sizes[i % std::size(sizes)];
      p.foff = rng_->below(kFileSize - p.size);
      p.boff = (i * 70000u + salt) % (16 * MiB - 65536);
      p.cookie = reinterpret_cast<void*>(static_cast<uintptr_t>(0xB0000 + salt + i));
      v.push_back(std::move(p));
    }
    v.back().foff = kFileSize - 100;  // straddles end of file
    v.back().size = 4096;
    v.back().expect = 100;
    return v;
  };
  const unsigned n = 128;
  auto run = [&](std::vector<Planned>& v, std::map<void*, CUfileIOEvents_t>* seen) {
    std::vector<CUfileIOParams_t> io = params(v, *buf);
    CUfileBatchHandle_t b = nullptr;
    ASSERT_EQ(cuFileBatchIOSetUp(&b, n).err, CU_FILE_SUCCESS);
    ASSERT_EQ(cuFileBatchIOSubmit(b, n, io.data(), 0).err, CU_FILE_SUCCESS);
    reap_all(b, n, v, seen);
    cuFileBatchIODestroy(b);
  };
  // Entries' buffer ranges must not overlap for the check below.
  std::vector<Planned> v = plan(n, 0);
  std::map<void*, CUfileIOEvents_t> seen;
  const unsigned long long copies_before = fake.host_to_device_copies();
  ASSERT_NO_FATAL_FAILURE(run(v, &seen));
  ASSERT_NO_FATAL_FAILURE(verify(v, seen, *buf));
  if (!fake.call_count || !fake.fail_call) return;  // the rest needs the test double's controls
  const unsigned long long copies = fake.host_to_device_copies() - copies_before;
  EXPECT_LT(copies, n / 2) << "small reads were copied one by one";
  EXPECT_GT(fake.call_count("cuMemcpyBatchAsync_v2"), 0u);

  AtExit undo([&] { fake.reset_faults(); });
  ASSERT_EQ(fake.fail_call("cuMemcpyBatchAsync_v2", 1, 999), 0);
  std::vector<Planned> w = plan(n, 1);
  std::map<void*, CUfileIOEvents_t> seen2;
  ASSERT_NO_FATAL_FAILURE(run(w, &seen2));
  unsigned failed = 0;
  for (const Planned& p : w) {
    const CUfileIOEvents_t& ev = seen2.at(p.cookie);
    if (ev.status == CUFILE_FAILED) {
      ++failed;
      continue;
    }
    EXPECT_EQ(ev.status, CUFILE_COMPLETE);
    EXPECT_EQ(ev.ret, p.expect);
    std::vector<uint8_t> got = buf->read_back(p.boff, p.expect);
    EXPECT_EQ(first_mismatch(got.data(), shadow_[p.file].data() + p.foff, p.expect), "");
  }
  EXPECT_GT(failed, 1u) << "the failed batched copy carried one entry only";
  EXPECT_LT(failed, n) << "one failed copy failed every entry";
}

TEST_F(BatchTest, CancelRacesCompletions) {
  Watchdog dog(std::chrono::seconds(120), "CancelRacesCompletions");
  std::string why;
  auto buf = Buffer::make(Mem::pageable, 64 * 4096, &why);
  ASSERT_TRUE(buf);
  for (int round = 0; round < 1000; ++round) {
    const unsigned n = 1 + round % 64;
    std::vector<CUfileIOParams_t> io(n);
    for (unsigned i = 0; i < n; ++i) {
      io[i] = entry(handles_[round % 2].get(), CUFILE_READ, buf->ptr(),
                    static_cast<off_t>(i * 4096), static_cast<off_t>(i * 4096), 4096, i);
    }
    CUfileBatchHandle_t b = nullptr;
    ASSERT_EQ(cuFileBatchIOSetUp(&b, n).err, CU_FILE_SUCCESS);
    ASSERT_EQ(cuFileBatchIOSubmit(b, n, io.data(), 0).err, CU_FILE_SUCCESS);
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(round % 50));
    if (round % 2 == 0) {
      EXPECT_EQ(cuFileBatchIOCancel(b).err, CU_FILE_SUCCESS);
      // Every entry has reported (complete or canceled) once cancel returned... or will: reap.
      std::vector<CUfileIOEvents_t> ev(n);
      unsigned got = 0;
      for (int k = 0; k < 100 && got < n; ++k) {
        unsigned nr = n;
        timespec t = ms(20);
        ASSERT_EQ(cuFileBatchIOGetStatus(b, 0, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
        for (unsigned e = 0; e < nr; ++e)
          EXPECT_TRUE(ev[e].status == CUFILE_COMPLETE || ev[e].status == CUFILE_CANCELED) << ev[e].status;
        got += nr;
        if (nr == 0) break;
      }
      EXPECT_LE(got, n);
    }
    cuFileBatchIODestroy(b);
  }
}

// Destroy with IO in flight: no hang, no crash, and the driver still closes afterwards.
TEST_F(BatchTest, DestroyWithIoInFlight) {
  Watchdog dog(std::chrono::seconds(60), "DestroyWithIoInFlight");
  std::string why;
  const Mem kind = has_driver() ? Mem::device : Mem::pageable;
  for (int round = 0; round < 5; ++round) {
    const unsigned n = 64;
    auto buf = Buffer::make(kind, n * 512 * KiB, &why);
    ASSERT_TRUE(buf) << why;
    std::vector<CUfileIOParams_t> io(n);
    for (unsigned i = 0; i < n; ++i) {
      io[i] = entry(handles_[i % 2].get(), (i % 3 == 0) ? CUFILE_WRITE : CUFILE_READ,
                    buf->ptr(), static_cast<off_t>(i * 512 * KiB),
                    static_cast<off_t>(i * 512 * KiB), 512 * KiB, i);
    }
    CUfileBatchHandle_t b = nullptr;
    ASSERT_EQ(cuFileBatchIOSetUp(&b, n).err, CU_FILE_SUCCESS);
    ASSERT_EQ(cuFileBatchIOSubmit(b, n, io.data(), 0).err, CU_FILE_SUCCESS);
    if (round % 2) std::this_thread::sleep_for(std::chrono::milliseconds(round));
    cuFileBatchIODestroy(b);
    // The buffer is freed right after: the batch must be done with it.
  }
  handles_[0].reset();
  handles_[1].reset();
  EXPECT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
}

// The driver closes while a batch is in flight and unreaped: close does not hang, and the
// batch's events can still be reaped (or the batch destroyed) afterwards.
TEST_F(BatchTest, DriverCloseWithBatchInFlight) {
  Watchdog dog(std::chrono::seconds(60), "DriverCloseWithBatchInFlight");
  std::string why;
  const Mem kind = has_driver() ? Mem::device : Mem::pageable;
  const unsigned n = 16;
  auto buf = Buffer::make(kind, n * 1 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  std::vector<CUfileIOParams_t> io(n);
  for (unsigned i = 0; i < n; ++i) {
    io[i] = entry(handles_[0].get(), CUFILE_READ, buf->ptr(), static_cast<off_t>(i * MiB),
                  static_cast<off_t>(i * MiB), 1 * MiB, i);
  }
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, n).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileBatchIOSubmit(b, n, io.data(), 0).err, CU_FILE_SUCCESS);
  handles_[0].reset();  // deregisters: waits for the entries using it
  handles_[1].reset();
  drain_driver();
  EXPECT_EQ(cuFileUseCount(), 0);
  std::vector<CUfileIOEvents_t> ev(n);
  unsigned got = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (got < n && since(t0) < 10) {
    unsigned nr = n;
    timespec t = ms(50);
    if (cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t).err != CU_FILE_SUCCESS) break;
    for (unsigned i = 0; i < nr; ++i) {
      EXPECT_EQ(ev[i].status, CUFILE_COMPLETE);
      EXPECT_EQ(ev[i].ret, 1 * MiB);
    }
    got += nr;
  }
  EXPECT_EQ(got, n) << "the events of a batch that completed before close";
  cuFileBatchIODestroy(b);
  std::vector<uint8_t> data = buf->read_back(0, n * MiB);
  EXPECT_EQ(first_mismatch(data.data(), shadow_[0].data(), n * MiB), "");
}

// Eight threads, each with its own batches over its own part of the files.
TEST_F(BatchTest, EightThreadsOwnBatches) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "EightThreadsOwnBatches");
  constexpr int kThreads = 8, kRounds = 6, kEntries = 16;
  constexpr uint64_t kSlice = kFileSize / kThreads;  // 3 MiB each
  std::atomic<int> failures{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bind_context();
      Rng rng(seed_ + static_cast<uint64_t>(t));
      const Mem kind = has_driver() ? kAllMem[t % 3] : Mem::pageable;
      std::string why;
      auto buf = Buffer::make(kind, 2 * kEntries * 64 * KiB, &why);
      if (!buf) {
        errors[t] = why;
        ++failures;
        return;
      }
      std::vector<uint8_t> shadow[2];
      for (int f = 0; f < 2; ++f)
        shadow[f].assign(shadow_[f].begin() + t * kSlice, shadow_[f].begin() + (t + 1) * kSlice);
      CUfileBatchHandle_t b = nullptr;
      if (cuFileBatchIOSetUp(&b, kEntries).err != CU_FILE_SUCCESS) {
        errors[t] = "setup failed";
        ++failures;
        return;
      }
      for (int round = 0; round < kRounds && errors[t].empty(); ++round) {
        struct E {
          int file;
          bool write;
          uint64_t off;  // within the slice
          size_t size, boff;
          std::vector<uint8_t> data;
        };
        std::vector<E> es;
        std::vector<CUfileIOParams_t> io;
        for (int i = 0; i < kEntries; ++i) {
          E e;
          e.file = i % 2;
          e.write = rng.below(2) == 1;
          e.size = 1 + rng.below(64 * KiB);
          e.off = (i / 2) * (kSlice / (kEntries / 2)) + rng.below(4096);
          e.boff = i * 64 * KiB + 64 * KiB - e.size;
          if (e.write) {
            e.data = rng.bytes(e.size);
            buf->upload(e.boff, e.data.data(), e.size);
          }
          CUfileIOParams_t p{};
          p.mode = CUFILE_BATCH;
          p.u.batch.devPtr_base = buf->ptr();
          p.u.batch.file_offset = static_cast<off_t>(t * kSlice + e.off);
          p.u.batch.devPtr_offset = static_cast<off_t>(e.boff);
          p.u.batch.size = e.size;
          p.fh = handles_[e.file].get();
          p.opcode = e.write ? CUFILE_WRITE : CUFILE_READ;
          p.cookie = reinterpret_cast<void*>(uintptr_t(i + 1));
          io.push_back(p);
          es.push_back(std::move(e));
        }
        if (cuFileBatchIOSubmit(b, kEntries, io.data(), 0).err != CU_FILE_SUCCESS) {
          errors[t] = "submit failed";
          break;
        }
        std::vector<CUfileIOEvents_t> ev(kEntries);
        std::vector<bool> done(kEntries, false);
        int got = 0;
        auto t0 = std::chrono::steady_clock::now();
        while (got < kEntries && since(t0) < 60) {
          unsigned nr = kEntries;
          timespec ts = ms(100);
          if (cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &ts).err != CU_FILE_SUCCESS) break;
          for (unsigned k = 0; k < nr; ++k) {
            uintptr_t c = reinterpret_cast<uintptr_t>(ev[k].cookie);
            if (c < 1 || c > kEntries || done[c - 1]) {
              errors[t] = "bad or repeated cookie";
              continue;
            }
            done[c - 1] = true;
            ++got;
            const E& e = es[c - 1];
            if (ev[k].status != CUFILE_COMPLETE || ev[k].ret != e.size)
              errors[t] = "entry " + std::to_string(c - 1) + " status " + std::to_string(ev[k].status) +
                          " ret " + std::to_string(static_cast<ssize_t>(ev[k].ret));
          }
        }
        if (got < kEntries) {
          errors[t] = "timed out reaping";
          break;
        }
        for (const E& e : es) {
          if (e.write) {
            std::memcpy(shadow[e.file].data() + e.off, e.data.data(), e.size);
          } else {
            std::vector<uint8_t> got_data = buf->read_back(e.boff, e.size);
            std::string m = first_mismatch(got_data.data(), shadow[e.file].data() + e.off, e.size);
            if (!m.empty()) errors[t] = "read data: " + m;
          }
        }
      }
      cuFileBatchIODestroy(b);
      for (int f = 0; f < 2 && errors[t].empty(); ++f) {
        std::vector<uint8_t> file = read_file(paths_[f], t * kSlice, kSlice);
        std::string m = first_mismatch(file.data(), shadow[f].data(), kSlice);
        if (!m.empty()) errors[t] = "file " + std::to_string(f) + ": " + m;
      }
      if (!errors[t].empty()) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace capi_test
