// core/stats_export: the segment `gpufile stats PID` reads, from inside the publishing process
// (tests/cli/stats_pid_test.py reads it from another one).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/stats.hpp"
#include "core/stats_export.hpp"
#include "sys/os.hpp"

namespace gpufile::stats {
namespace {

constexpr int kRead = static_cast<int>(Op::read);
const int kPid = static_cast<int>(::getpid());

bool segment_exists() {
  return std::filesystem::exists("/dev/shm" + segment_name(kPid, 0));
}

class StatsExportTest : public ::testing::Test {
 protected:
  void SetUp() override { restore(); }
  void TearDown() override { restore(); }
  static void restore() {
    sys::set_os(nullptr);
    set_level(0);
    start();
    reset();
  }
};

TEST_F(StatsExportTest, NoSegmentWhileStatsAreOff) {
  EXPECT_FALSE(segment_exists());
  EXPECT_EQ(read_published(kPid).status, ReadStatus::no_segment);
}

TEST_F(StatsExportTest, AReaderSeesWhatTheProcessSawOfItself) {
  ASSERT_TRUE(set_level(2));
  ASSERT_TRUE(segment_exists());
  record_call(Op::read, 8192, 5000, true);
  record_call(Op::read, 1 << 20, 9000, true);
  record_call(Op::read, 4096, 0, false);
  record_path(Op::read, Path::page_cache, 8192 + (1 << 20));
  record_runners(Op::read, 8192, 1 << 20);
  const Snapshot own = snapshot();
  const ReadResult r = read_published(kPid);
  ASSERT_EQ(r.status, ReadStatus::ok);
  EXPECT_EQ(r.segments, 1);
  EXPECT_GT(r.published_unix_ns, 0u);
  const OpTotals& seen = r.snapshot.ops[kRead];
  EXPECT_EQ(r.snapshot.level, 2);
  EXPECT_EQ(seen.calls.ok, 2u);
  EXPECT_EQ(seen.calls.err, 1u);
  EXPECT_EQ(seen.bytes, own.ops[kRead].bytes);
  EXPECT_EQ(seen.latency_ns, 14000u);
  EXPECT_EQ(seen.size_hist[size_bucket(8192)], 1u);
  EXPECT_EQ(seen.size_hist[size_bucket(1 << 20)], 1u);
  const int page_cache = static_cast<int>(Path::page_cache);
  EXPECT_EQ(r.snapshot.paths[kRead][page_cache].bytes, 8192u + (1 << 20));
  EXPECT_EQ(r.snapshot.caller_bytes[kRead], 8192u);
  EXPECT_EQ(r.snapshot.worker_bytes[kRead], 1u << 20);
}

TEST_F(StatsExportTest, ThePublisherRefreshesWithoutASnapshotOfTheProcess) {
  ASSERT_TRUE(set_level(1));
  record_call(Op::read, 4096, 100, true);
  // The thread publishes every 100 ms; allow a loaded machine far more.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ReadResult r;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r = read_published(kPid);
  } while (r.snapshot.ops[kRead].calls.ok == 0 && std::chrono::steady_clock::now() < give_up);
  ASSERT_EQ(r.status, ReadStatus::ok);
  EXPECT_EQ(r.snapshot.ops[kRead].calls.ok, 1u);
}

TEST_F(StatsExportTest, LevelZeroAndStopRemoveTheSegment) {
  ASSERT_TRUE(set_level(1));
  EXPECT_TRUE(segment_exists());
  stop();
  EXPECT_FALSE(segment_exists());
  start();
  EXPECT_TRUE(segment_exists());
  ASSERT_TRUE(set_level(0));
  EXPECT_FALSE(segment_exists());
  EXPECT_EQ(read_published(kPid).status, ReadStatus::no_segment);
}

// fork(): the child publishes nothing of its own until its level is set again, and its stats
// going off (the same check as its exit handler's) does not touch its parent's segment.
TEST_F(StatsExportTest, AForkedChildLeavesItsParentsSegmentAlone) {
  ASSERT_TRUE(set_level(1));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int failures = 0;
    if (read_published(static_cast<int>(::getpid())).status != ReadStatus::no_segment) failures |= 1;
    set_level(0);
    if (!segment_exists()) failures |= 2;
    // _exit: LeakSanitizer's check at exit can deadlock in the child of a threaded process.
    ::_exit(failures);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child published, 2: it removed the parent's segment";
  EXPECT_TRUE(segment_exists());
  EXPECT_EQ(read_published(kPid).status, ReadStatus::ok);
}

// No shared memory (a container without /dev/shm): stats work in the process all the same.
class NoSharedMemory : public sys::Os {
 public:
  int shm_create(const char*, size_t, void**) override { return -EACCES; }
};

TEST_F(StatsExportTest, WithoutSharedMemoryStatsStillCount) {
  NoSharedMemory os;
  sys::set_os(&os);
  ASSERT_TRUE(set_level(1));
  record_call(Op::read, 4096, 100, true);
  EXPECT_EQ(snapshot().ops[kRead].calls.ok, 1u);
  EXPECT_FALSE(segment_exists());
  EXPECT_EQ(read_published(kPid).status, ReadStatus::no_segment);
}

TEST_F(StatsExportTest, LatencyHistogramsAndDeviceRowsRoundTrip) {
  ASSERT_TRUE(set_level(3));
  record_latency(Op::read, Path::remote, 3000);          // 3 us: bucket 2
  record_latency(Op::write, Path::staged_direct, 0);    // under 1 us: bucket 0
  record_device(Op::read, 1, 1 << 20, true);
  record_device(Op::write, -1, 4096, false);
  record_device(Op::read, 99, 5, true);
  (void)snapshot();  // publishes
  const ReadResult r = read_published(kPid);
  ASSERT_EQ(r.status, ReadStatus::ok);
  const Snapshot& s = r.snapshot;
  EXPECT_EQ(s.paths[kRead][static_cast<int>(Path::remote)].latency_hist[2], 1u);
  EXPECT_EQ(s.paths[1][static_cast<int>(Path::staged_direct)].latency_hist[0], 1u);
  EXPECT_EQ(s.devices[1][kRead].bytes, 1u << 20);
  EXPECT_EQ(s.devices[1][kRead].calls.ok, 1u);
  EXPECT_EQ(s.devices[kHostRow][1].calls.err, 1u);
  EXPECT_EQ(s.devices[kHostRow][1].bytes, 0u);
  EXPECT_EQ(s.devices[kOtherGpusRow][kRead].bytes, 5u);
}

// A segment that a gpufile of another layout version left for a live process (this one).
class ForeignSegment {
 public:
  explicit ForeignSegment(uint32_t version) : name_(segment_name(kPid, 0)) {
    void* mem = nullptr;
    created_ = sys::os().shm_create(name_.c_str(), 256, &mem) == 0;
    if (!created_) return;
    const uint32_t header[2] = {0x54534647, version};  // magic "GFST", version
    std::memcpy(mem, header, sizeof header);
    sys::os().unmap(mem, 256);
  }
  ~ForeignSegment() {
    if (created_) sys::os().shm_remove(name_.c_str());
  }
  bool created() const { return created_; }

 private:
  std::string name_;
  bool created_ = false;
};

TEST_F(StatsExportTest, ASegmentOfAnotherVersionIsRefusedWithItsVersion) {
  for (uint32_t version : {1u, kSegmentVersion + 1}) {
    ForeignSegment foreign(version);
    ASSERT_TRUE(foreign.created());
    const ReadResult r = read_published(kPid);
    EXPECT_EQ(r.status, ReadStatus::mismatch) << version;
    EXPECT_EQ(r.found_version, version);
  }
  EXPECT_EQ(read_published(kPid).status, ReadStatus::no_segment);  // removed again
}

TEST(StatsExportNames, PidAndIndex) {
  EXPECT_EQ(segment_name(42, 0), "/gpufile-stats-42");
  EXPECT_EQ(segment_name(42, 3), "/gpufile-stats-42.3");
}

}  // namespace
}  // namespace gpufile::stats
