// Settings by cufile.json key (staged for the next driver open) and the statistics.
#include <vector>

#include "support.hpp"

namespace cpp_test {
namespace {

using gpufile::errc;

using Settings = CppApiTest;

TEST_F(Settings, AreStagedForTheNextOpenAndFixedWhileOpen) {
  EXPECT_NE(gpufile::settings_json().find("\"gpufile.workers\""), std::string::npos);
  EXPECT_EQ(gpufile::setting("gpufile.workers"), "0");  // automatic
  gpufile::set_setting("gpufile.workers", 3);
  gpufile::set_setting("gpufile.direct_io", "never");
  gpufile::set_setting("gpufile.cache_policy", "keep");
  EXPECT_GPUFILE_ERROR(gpufile::set_setting("gpufile.cache_policy", "sometimes"), errc::invalid_argument);
  gpufile::set_setting("properties.use_poll_mode", true);
  EXPECT_EQ(gpufile::setting("gpufile.workers"), "3");  // what the next open will use
  gpufile::driver_open();
  EXPECT_TRUE(gpufile::is_driver_open());
  EXPECT_EQ(gpufile::setting("gpufile.workers"), "3");  // what the open driver uses
  EXPECT_EQ(gpufile::setting("gpufile.direct_io"), "\"never\"");
  EXPECT_EQ(gpufile::setting("gpufile.cache_policy"), "\"keep\"");
  EXPECT_EQ(gpufile::setting("properties.use_poll_mode"), "true");
  EXPECT_GPUFILE_ERROR(gpufile::set_setting("gpufile.workers", 4), errc::driver_open);
  gpufile::driver_close();
  EXPECT_FALSE(gpufile::is_driver_open());
  EXPECT_EQ(gpufile::setting("gpufile.workers"), "0");  // an open consumes what was staged
}

TEST_F(Settings, ChooseTheEngine) {
  gpufile::set_setting("gpufile.engine", "posix");
  EXPECT_EQ(gpufile::io_engine(), "posix");  // opens the driver
}

TEST_F(Settings, BoundTheBatchCapacity) {
  gpufile::set_setting("properties.io_batchsize", 4);
  EXPECT_GPUFILE_ERROR(gpufile::IoBatch(5), errc::invalid_argument);
  EXPECT_EQ(gpufile::IoBatch(4).capacity(), 4u);
}

TEST_F(Settings, RefuseUnknownKeysAndBadValues) {
  EXPECT_GPUFILE_ERROR(gpufile::set_setting("gpufile.no_such_key", 1), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(gpufile::set_setting("gpufile.workers", 100000), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(gpufile::set_setting("gpufile.workers", "four"), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(gpufile::set_setting("gpufile.engine", "fast"), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(gpufile::set_setting_json("gpufile.workers", "{"), errc::invalid_argument);
  EXPECT_GPUFILE_ERROR(gpufile::setting("gpufile.no_such_key"), errc::invalid_argument);
  EXPECT_EQ(gpufile::setting("gpufile.workers"), "0");  // nothing was staged
}

using Statistics = CppApiTest;

TEST_F(Statistics, CountCallsBytesAndPaths) {
  gpufile::set_setting("profile.cufile_stats", 1);
  const std::string path = dir_.file("a");
  const auto bytes = random_bytes(3 * 1024 * 1024 + 5, 31);
  write_file(path, bytes);
  gpufile::File f(path, "r+");  // opens the driver with the setting
  gpufile::reset_statistics();

  Memory host(Mem::pageable, bytes.size()), device(Mem::device, bytes.size());
  ASSERT_EQ(f.read(host.get(), bytes.size(), 0), bytes.size());
  ASSERT_EQ(f.pread(device.get(), bytes.size(), 0).get(), bytes.size());
  ASSERT_EQ(f.write(host.get(), 1000, 17), 1000u);
  EXPECT_GPUFILE_ERROR(f.read(host.get(), 10, -1), errc::invalid_argument);

  const gpufile::Stats s = gpufile::statistics();
  EXPECT_EQ(s.level, 1);
  EXPECT_EQ(s.read.calls_ok, 2u);
  EXPECT_EQ(s.read.calls_failed, 1u);
  EXPECT_EQ(s.read.bytes, 2 * bytes.size());
  EXPECT_EQ(s.write.calls_ok, 1u);
  EXPECT_EQ(s.write.bytes, 1000u);
  const auto by_path = [](const gpufile::OpStats& op) {
    return op.staged_direct.bytes + op.page_cache.bytes + op.host_direct.bytes +
           op.small_io.bytes;
  };
  EXPECT_EQ(by_path(s.read), 2 * bytes.size());
  EXPECT_EQ(s.read.caller_bytes + s.read.worker_bytes, 2 * bytes.size());
  EXPECT_GE(s.read.worker_bytes, bytes.size());  // the future's read ran on the workers
  EXPECT_EQ(by_path(s.write), 1000u);
  EXPECT_GT(s.pinned_staging_bytes, 0u);  // the device read was staged

  gpufile::reset_statistics();
  EXPECT_EQ(gpufile::statistics().read.calls_ok, 0u);
  EXPECT_EQ(by_path(gpufile::statistics().read), 0u);
  f.close();
  gpufile::driver_close();
  EXPECT_EQ(gpufile::statistics().pinned_staging_bytes, 0u);
}

TEST_F(Statistics, CountTheBatchApi) {
  gpufile::set_setting("profile.cufile_stats", 1);
  const std::string path = dir_.file("a");
  const auto bytes = random_bytes(1 << 20, 32);
  write_file(path, bytes);
  gpufile::File f(path);
  gpufile::reset_statistics();
  Memory device(Mem::device, bytes.size());
  {
    gpufile::IoBatch batch(4);
    const gpufile::BatchOp ops[] = {
        {.op = gpufile::IoOp::read, .file = &f, .buf = device.get(), .size = 4096, .tag = 1},
        {.op = gpufile::IoOp::read, .file = &f, .buf = device.get(), .size = 8192,
         .file_offset = 4096, .buf_offset = 4096, .tag = 2}};
    batch.submit(ops);
    std::size_t ended = 0;
    while (ended < 2) ended += batch.wait(2 - ended).size();
    const std::vector<gpufile::BatchOp> past_capacity(5, ops[0]);
    EXPECT_GPUFILE_ERROR(batch.submit(past_capacity), errc::batch_full);
  }
  const gpufile::BatchStats b = gpufile::statistics().batch;
  EXPECT_EQ(b.setup_ok, 1u);
  EXPECT_EQ(b.submit_ok, 1u);
  EXPECT_EQ(b.submit_failed, 1u);
  EXPECT_EQ(b.entries_submitted, 2u);
  EXPECT_EQ(b.entries_ok, 2u);
  EXPECT_EQ(b.entries_failed, 0u);
  EXPECT_EQ(b.read_bytes, 4096u + 8192u);
  EXPECT_EQ(b.write_bytes, 0u);
  EXPECT_EQ(b.destroy_ok, 1u);
  gpufile::reset_statistics();
  EXPECT_EQ(gpufile::statistics().batch.entries_ok, 0u);
}

TEST_F(Statistics, LevelThreeTimesCallsAndCountsEachDevice) {
  gpufile::set_setting("profile.cufile_stats", 3);
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(1 << 20, 33));
  gpufile::File f(path, "r");
  gpufile::reset_statistics();
  Memory host(Mem::pageable, 1 << 20), device(Mem::device, 1 << 20);
  ASSERT_EQ(f.read(device.get(), 1 << 20, 0), 1u << 20);
  ASSERT_EQ(f.pread(device.get(), 4096, 0).get(), 4096u);
  ASSERT_EQ(f.read(host.get(), 8192, 0), 8192u);

  const gpufile::Stats s = gpufile::statistics();
  std::uint64_t timed = 0;
  for (std::uint64_t n : s.read.latency.buckets) timed += n;
  EXPECT_EQ(timed, 3u);
  EXPECT_GE(s.read.latency.p50_us, 1u);
  EXPECT_LE(s.read.latency.p50_us, s.read.latency.max_us);
  ASSERT_EQ(s.devices.size(), 2u);  // GPU 0, then host memory
  EXPECT_EQ(s.devices[0].device, 0);
  EXPECT_EQ(s.devices[0].read_calls_ok, 2u);
  EXPECT_EQ(s.devices[0].read_bytes, (1u << 20) + 4096);
  EXPECT_EQ(s.devices[1].device, gpufile::DeviceStats::kHost);
  EXPECT_EQ(s.devices[1].read_calls_ok, 1u);
  EXPECT_EQ(s.devices[1].read_bytes, 8192u);
  EXPECT_EQ(s.read.remote.bytes, 0u);
  f.close();
  gpufile::driver_close();
}

TEST_F(Statistics, CountPathsEvenWhenCallsAreNotCounted) {
  const std::string path = dir_.file("a");
  write_file(path, random_bytes(100000, 32));
  gpufile::File f(path);
  gpufile::reset_statistics();
  Memory host(Mem::pageable, 100000);
  ASSERT_EQ(f.read(host.get(), 100000, 0), 100000u);
  const gpufile::Stats s = gpufile::statistics();
  EXPECT_EQ(s.level, 0);
  EXPECT_EQ(s.read.calls_ok, 0u);
  EXPECT_EQ(s.read.latency.max_us, 0u);  // level 0: no call timed,
  EXPECT_TRUE(s.devices.empty());       // no device counted
  EXPECT_EQ(s.read.staged_direct.bytes + s.read.page_cache.bytes + s.read.host_direct.bytes +
                s.read.small_io.bytes,
            100000u);
}

}  // namespace
}  // namespace cpp_test
