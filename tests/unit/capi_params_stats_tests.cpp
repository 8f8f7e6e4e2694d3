// The cuFile parameter and statistics entry points (src/capi/params.cpp, src/capi/stats.cpp)
// against a fake driver session (fake_driver_state.cpp). Built as capi_unit_tests.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <span>
#include <string>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "cufile.h"

namespace gpufile {
namespace fake {
void set_driver_open(bool open, const Settings& s);
Settings open_settings();
void set_gpu_count(int n);
}  // namespace fake
namespace capi {
void fill_stats_l1(const stats::Snapshot& s, CUfileStatsLevel1_t& out);
void fill_stats_l2(const stats::Snapshot& s, CUfileStatsLevel2_t& out);
void fill_stats_l3(const stats::Snapshot& s, std::span<const cuda::CUuuid> gpus, CUfileStatsLevel3_t& out);
}  // namespace capi

namespace {

static_assert(sizeof(CUfileStatsLevel1_t) == 512);
static_assert(sizeof(CUfileStatsLevel2_t) == 1024);
static_assert(sizeof(CUfileStatsLevel3_t) == 5000);

#define EXPECT_CUFILE(call, code) EXPECT_EQ((call).err, code)

class CapiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The string getters of a closed driver read these.
    unsetenv("CUFILE_LOGGING_LEVEL");
    unsetenv("CUFILE_LOGFILE_PATH");
    restore();
  }
  void TearDown() override { restore(); }
  static void restore() {
    fake::set_driver_open(false, Settings{});
    fake::set_gpu_count(0);
    config::clear_staged();
    stats::set_level(0);
    stats::start();
    stats::reset();
    log::set_level(LogLevel::off);  // the refusals below log; keep the test output clean
  }
};

// ---- parameters --------------------------------------------------------------------------------

TEST_F(CapiTest, SizeParametersStageWhileClosed) {
  size_t v = 1;
  EXPECT_CUFILE(cuFileGetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &v), CU_FILE_SUCCESS);
  EXPECT_EQ(v, 0u);  // cuFile's unstaged value before open
  EXPECT_CUFILE(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 99), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &v), CU_FILE_SUCCESS);
  EXPECT_EQ(v, 99u);  // out of range, still accepted: checked at open
  EXPECT_CUFILE(cuFileSetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, 2), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, &v), CU_FILE_SUCCESS);
  EXPECT_EQ(v, 2u);
}

TEST_F(CapiTest, SettersRefuseAnOpenDriver) {
  fake::set_driver_open(true, Settings{});
  const size_t sizes[] = {4};
  const size_t counts[] = {1};
  EXPECT_CUFILE(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 64),
                CU_FILE_DRIVER_ALREADY_OPEN);
  EXPECT_CUFILE(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, true),
                CU_FILE_DRIVER_ALREADY_OPEN);
  EXPECT_CUFILE(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, "/tmp"), CU_FILE_DRIVER_ALREADY_OPEN);
  EXPECT_CUFILE(cuFileSetParameterPosixPoolSlabArray(sizes, counts, 1), CU_FILE_DRIVER_ALREADY_OPEN);
  EXPECT_EQ(fake::open_settings().io_batchsize, Settings{}.io_batchsize);
}

TEST_F(CapiTest, GettersReadTheOpenDriversSettings) {
  ASSERT_EQ(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 7).err, CU_FILE_SUCCESS);
  Settings s;
  s.io_batchsize = 32;
  s.use_poll_mode = true;
  s.log_dir = "/var/log/gpufile";
  s.posix_pool_slab_size_kb = {8};
  s.posix_pool_slab_count = {2};
  fake::set_driver_open(true, s);
  size_t v = 0;
  bool b = false;
  char text[64];
  EXPECT_CUFILE(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v), CU_FILE_SUCCESS);
  EXPECT_EQ(v, 32u);
  EXPECT_CUFILE(cuFileGetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &v), CU_FILE_SUCCESS);
  EXPECT_EQ(v, 4u);  // the runtime default, not the closed driver's 0
  EXPECT_CUFILE(cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, &b), CU_FILE_SUCCESS);
  EXPECT_TRUE(b);
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOG_DIR, text, sizeof text), CU_FILE_SUCCESS);
  EXPECT_STREQ(text, "/var/log/gpufile");
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, text, sizeof text), CU_FILE_SUCCESS);
  EXPECT_STREQ(text, "ERROR");
  size_t sizes[1], counts[1];
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, counts, 1), CU_FILE_SUCCESS);
  EXPECT_EQ(sizes[0], 8u);
  EXPECT_EQ(counts[0], 2u);
}

TEST_F(CapiTest, BadArgumentsAreInvalidValue) {
  size_t v;
  bool b;
  char text[8];
  // Unknown ids that C++ can still hold in these enums (C callers may pass any int; the entry
  // points read the raw bytes, but creating such a value here would be undefined behaviour).
  const auto bad_size = static_cast<CUFileSizeTConfigParameter_t>(12);
  const auto bad_bool = static_cast<CUFileBoolConfigParameter_t>(15);
  const auto bad_string = static_cast<CUFileStringConfigParameter_t>(3);
  EXPECT_CUFILE(cuFileSetParameterSizeT(bad_size, 1), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterSizeT(bad_size, &v), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, nullptr), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileSetParameterBool(bad_bool, true), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterBool(bad_bool, &b), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterBool(CUFILE_PARAM_PROFILE_NVTX, nullptr), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileSetParameterString(bad_string, "x"), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, nullptr), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterString(bad_string, text, sizeof text), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOG_DIR, nullptr, 8), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOG_DIR, text, 0), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOG_DIR, text, -1), CU_FILE_INVALID_VALUE);
}

TEST_F(CapiTest, StringGetterNeedsRoomForTheValueAndItsNul) {
  ASSERT_EQ(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, "/abc").err, CU_FILE_SUCCESS);
  char text[8];
  std::memset(text, '#', sizeof text);
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOG_DIR, text, 4), CU_FILE_INVALID_VALUE);
  EXPECT_EQ(text[0], '#');  // untouched
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_LOG_DIR, text, 5), CU_FILE_SUCCESS);
  EXPECT_STREQ(text, "/abc");
  // Unstaged, before open: the environment's value, as cuFile.
  setenv("CUFILE_LOGFILE_PATH", "/l.log", 1);
  EXPECT_CUFILE(cuFileGetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, text, sizeof text), CU_FILE_SUCCESS);
  EXPECT_STREQ(text, "/l.log");
  unsetenv("CUFILE_LOGFILE_PATH");
  // An over-long value is refused at Set.
  std::string huge(5000, 'a');
  EXPECT_CUFILE(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, huge.c_str()), CU_FILE_INVALID_VALUE);
}

TEST_F(CapiTest, NvtxSetsAndGetsAsIn115) {
  bool b = true;
  EXPECT_CUFILE(cuFileGetParameterBool(CUFILE_PARAM_PROFILE_NVTX, &b), CU_FILE_SUCCESS);
  EXPECT_FALSE(b);
  EXPECT_CUFILE(cuFileSetParameterBool(CUFILE_PARAM_PROFILE_NVTX, true), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetParameterBool(CUFILE_PARAM_PROFILE_NVTX, &b), CU_FILE_SUCCESS);
  EXPECT_TRUE(b);
}

TEST_F(CapiTest, MinMax) {
  size_t lo = 0, hi = 0;
  EXPECT_CUFILE(cuFileGetParameterMinMaxValue(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &lo, &hi), CU_FILE_SUCCESS);
  EXPECT_EQ(lo, 0u);
  EXPECT_EQ(hi, 32u);
  EXPECT_CUFILE(cuFileGetParameterMinMaxValue(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, &lo, &hi), CU_FILE_SUCCESS);
  EXPECT_EQ(lo, 4u);
  EXPECT_EQ(hi, 18014398509481980u);
  EXPECT_CUFILE(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS, &lo, &hi), CU_FILE_SUCCESS);
  EXPECT_EQ(lo, 1u);
  EXPECT_EQ(hi, 1000u);
  EXPECT_CUFILE(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROFILE_STATS, &lo, &hi), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, nullptr, &hi),
                CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterMinMaxValue(static_cast<CUFileSizeTConfigParameter_t>(15), &lo, &hi),
                CU_FILE_INVALID_VALUE);
}

TEST_F(CapiTest, PosixPoolSlabArray) {
  size_t sizes[4], counts[4];
  // Closed and unstaged, the pool has no slabs: every length is refused (NVIDIA's library,
  // tests/conformance, section params-closed).
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, counts, 3), CU_FILE_INVALID_VALUE);
  // Open: the defaults, and len must be exactly the number of slabs.
  fake::set_driver_open(true, Settings{});
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, counts, 2), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, counts, 4), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, counts, 3), CU_FILE_SUCCESS);
  EXPECT_EQ(sizes[2], 16384u);
  EXPECT_EQ(counts[0], 128u);
  fake::set_driver_open(false, Settings{});
  const size_t new_sizes[] = {64, 256};
  const size_t new_counts[] = {8, 2};
  EXPECT_CUFILE(cuFileSetParameterPosixPoolSlabArray(new_sizes, new_counts, 2), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, counts, 2), CU_FILE_SUCCESS);
  EXPECT_EQ(sizes[1], 256u);
  EXPECT_EQ(counts[1], 2u);
  EXPECT_CUFILE(cuFileSetParameterPosixPoolSlabArray(nullptr, new_counts, 2), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileSetParameterPosixPoolSlabArray(new_sizes, new_counts, 0), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetParameterPosixPoolSlabArray(sizes, nullptr, 2), CU_FILE_INVALID_VALUE);
}

TEST_F(CapiTest, StagedValuesReachTheNextOpen) {
  setenv("CUFILE_ENV_PATH_JSON", "/nonexistent/cufile.json", 1);
  ASSERT_EQ(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 16).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, false).err, CU_FILE_SUCCESS);
  config::Resolution r = config::resolve();
  unsetenv("CUFILE_ENV_PATH_JSON");
  EXPECT_EQ(r.settings.io_batchsize, 16u);
  EXPECT_FALSE(r.settings.allow_compat_mode);
}

// ---- statistics --------------------------------------------------------------------------------

TEST_F(CapiTest, StatsLevel) {
  int level = -1;
  EXPECT_CUFILE(cuFileSetStatsLevel(4), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileSetStatsLevel(-1), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetStatsLevel(nullptr), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileSetStatsLevel(2), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsLevel(&level), CU_FILE_SUCCESS);
  EXPECT_EQ(level, 2);
  // Closed: staged for the next open, so cufile.json cannot undo it.
  EXPECT_EQ(config::staged_size(config::SizeParam::profile_stats), 2u);
  // Open: the session's settings follow.
  fake::set_driver_open(true, Settings{});
  EXPECT_CUFILE(cuFileSetStatsLevel(3), CU_FILE_SUCCESS);
  EXPECT_EQ(fake::open_settings().stats_level, 3);
  EXPECT_EQ(stats::level(), 3);
}

TEST_F(CapiTest, StartStopResetNeedAnOpenDriver) {
  EXPECT_CUFILE(cuFileStatsStart(), CU_FILE_DRIVER_NOT_INITIALIZED);
  EXPECT_CUFILE(cuFileStatsStop(), CU_FILE_DRIVER_NOT_INITIALIZED);
  EXPECT_CUFILE(cuFileStatsReset(), CU_FILE_DRIVER_NOT_INITIALIZED);
  fake::set_driver_open(true, Settings{});
  ASSERT_EQ(cuFileSetStatsLevel(1).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileStatsStop(), CU_FILE_SUCCESS);
  EXPECT_FALSE(stats::started());
  // Stopping drops the level to 0, as NVIDIA's library does (tests/conformance, section stats).
  int level = -1;
  EXPECT_CUFILE(cuFileGetStatsLevel(&level), CU_FILE_SUCCESS);
  EXPECT_EQ(level, 0);
  EXPECT_EQ(fake::open_settings().stats_level, 0);
  ASSERT_EQ(cuFileSetStatsLevel(1).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileStatsStart(), CU_FILE_SUCCESS);
  EXPECT_TRUE(stats::started());
  stats::record_call(stats::Op::read, 10, 10, true);
  EXPECT_CUFILE(cuFileStatsReset(), CU_FILE_SUCCESS);
  EXPECT_EQ(stats::snapshot().ops[0].calls.ok, 0u);
}

TEST_F(CapiTest, GetStatsNeedsAnOpenDriverAStructAndTheLevel) {
  CUfileStatsLevel1_t l1;
  CUfileStatsLevel2_t l2;
  CUfileStatsLevel3_t l3;
  // Closed: refused whatever the level, as NVIDIA's library does (tests/conformance).
  ASSERT_EQ(cuFileSetStatsLevel(3).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL1(&l1), CU_FILE_DRIVER_NOT_INITIALIZED);
  EXPECT_CUFILE(cuFileGetStatsL2(&l2), CU_FILE_DRIVER_NOT_INITIALIZED);
  EXPECT_CUFILE(cuFileGetStatsL3(&l3), CU_FILE_DRIVER_NOT_INITIALIZED);
  fake::set_driver_open(true, Settings{});
  ASSERT_EQ(cuFileSetStatsLevel(0).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL1(&l1), CU_FILE_INVALID_VALUE);  // level 0
  ASSERT_EQ(cuFileSetStatsLevel(1).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL1(nullptr), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetStatsL1(&l1), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL2(&l2), CU_FILE_INVALID_VALUE);
  ASSERT_EQ(cuFileSetStatsLevel(2).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL2(&l2), CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL3(&l3), CU_FILE_INVALID_VALUE);
  ASSERT_EQ(cuFileSetStatsLevel(3).err, CU_FILE_SUCCESS);
  EXPECT_CUFILE(cuFileGetStatsL3(nullptr), CU_FILE_INVALID_VALUE);
  EXPECT_CUFILE(cuFileGetStatsL3(&l3), CU_FILE_SUCCESS);
}

// A snapshot with a known window: 2 reads of 1 MiB within half a second.
stats::Snapshot sample_snapshot() {
  stats::Snapshot s;
  s.level = 3;
  stats::OpTotals& r = s.ops[0];
  r.calls = {2, 1};
  r.bytes = 2 << 20;
  r.latency_ns = 600'000'000;
  r.first_start_ns = 1'000'000'000;
  r.last_end_ns = 1'500'000'000;
  r.size_hist[10] = 2;
  stats::OpTotals& w = s.ops[1];
  w.calls = {1, 0};
  w.bytes = 4096;
  w.latency_ns = 1'000;
  w.first_start_ns = 5'000;
  w.last_end_ns = 6'000;
  w.size_hist[2] = 1;
  s.paths[0][static_cast<int>(stats::Path::staged_direct)].ops = 3;
  s.paths[0][static_cast<int>(stats::Path::page_cache)].ops = 1;
  s.paths[1][static_cast<int>(stats::Path::host_direct)].ops = 1;
  s.handle_register = {4, 1};
  s.handle_deregister = {3, 0};
  s.buffer_register = {2, 1};
  s.buffer_deregister = {1, 0};
  s.registered_bytes = 1 << 21;
  s.batch.setup = {1, 0};
  s.batch.submit = {2, 0};
  s.batch.complete = {6, 1};
  s.batch.cancel = {1, 0};
  s.batch.destroy = {1, 0};
  s.batch.entries_submitted = 7;
  s.batch.bytes[0] = 3'000'000;
  s.batch.submit_latency_ns = 8'000;
  s.batch.completion_latency_ns = 60'000;
  s.batch.last_submit_bytes[0] = 1'000'000;
  s.batch.last_submit_bytes[1] = 4096;
  s.batch.first_submit_ns = 0;
  s.batch.last_complete_ns = 1'000'000'000;
  s.devices[0][0] = {{2, 1}, 2 << 20};                // GPU 0: the two reads
  s.devices[1][1] = {{1, 0}, 4096};                   // GPU 1: the write
  s.devices[stats::kHostRow][0] = {{7, 0}, 70'000};   // host memory: in no GPU's entry
  return s;
}

TEST(CapiStatsFill, Level1) {
  CUfileStatsLevel1_t l1;
  std::memset(&l1, 0xff, sizeof l1);  // everything must be written
  capi::fill_stats_l1(sample_snapshot(), l1);
  EXPECT_EQ(l1.read_ops.ok, 2u);
  EXPECT_EQ(l1.read_ops.err, 1u);
  EXPECT_EQ(l1.write_ops.ok, 1u);
  EXPECT_EQ(l1.hdl_register_ops.ok, 4u);
  EXPECT_EQ(l1.hdl_register_ops.err, 1u);
  EXPECT_EQ(l1.hdl_deregister_ops.ok, 3u);
  EXPECT_EQ(l1.buf_register_ops.err, 1u);
  EXPECT_EQ(l1.buf_deregister_ops.ok, 1u);
  EXPECT_EQ(l1.read_bytes, 2u << 20);
  EXPECT_EQ(l1.write_bytes, 4096u);
  EXPECT_EQ(l1.read_bw_bytes_per_sec, 4u << 20);  // 2 MiB in 0.5 s
  EXPECT_EQ(l1.write_bw_bytes_per_sec, 4096u * 1'000'000);  // 4 KiB in 1 µs
  EXPECT_EQ(l1.read_lat_avg_us, 300'000u);
  EXPECT_EQ(l1.write_lat_avg_us, 1u);
  EXPECT_EQ(l1.read_ops_per_sec, 4u);
  EXPECT_EQ(l1.read_lat_sum_us, 600'000u);
  EXPECT_EQ(l1.write_lat_sum_us, 1u);
  EXPECT_EQ(l1.batch_setup_ops.ok, 1u);
  EXPECT_EQ(l1.batch_submit_ops.ok, 2u);
  EXPECT_EQ(l1.batch_total_submit_ops.ok, 2u);
  EXPECT_EQ(l1.batch_complete_ops.ok, 6u);
  EXPECT_EQ(l1.batch_complete_ops.err, 1u);
  EXPECT_EQ(l1.batch_processed_ops.ok, 6u);
  EXPECT_EQ(l1.batch_posix_processed_ops.ok, 6u);
  EXPECT_EQ(l1.batch_enqueued_ops.ok, 7u);
  EXPECT_EQ(l1.batch_posix_enqueued_ops.ok, 7u);
  EXPECT_EQ(l1.batch_nvfs_submit_ops.ok, 0u);
  EXPECT_EQ(l1.batch_iouring_submit_ops.ok, 0u);
  EXPECT_EQ(l1.batch_cancel_ops.ok, 1u);
  EXPECT_EQ(l1.batch_destroy_ops.ok, 1u);
  EXPECT_EQ(l1.batch_read_bytes, 3'000'000u);
  EXPECT_EQ(l1.batch_write_bytes, 0u);
  EXPECT_EQ(l1.batch_read_bw_bytes, 3'000'000u);
  EXPECT_EQ(l1.batch_submit_lat_avg_us, 4u);
  EXPECT_EQ(l1.batch_completion_lat_avg_us, 10u);
  EXPECT_EQ(l1.batch_submit_ops_per_sec, 2u);
  EXPECT_EQ(l1.batch_complete_ops_per_sec, 6u);
  EXPECT_EQ(l1.batch_submit_lat_sum_us, 8u);
  EXPECT_EQ(l1.batch_completion_lat_sum_us, 60u);
  EXPECT_EQ(l1.last_batch_read_bytes, 1'000'000u);
  EXPECT_EQ(l1.last_batch_write_bytes, 4096u);
}

TEST(CapiStatsFill, Level2AddsHistograms) {
  CUfileStatsLevel2_t l2;
  std::memset(&l2, 0xff, sizeof l2);
  capi::fill_stats_l2(sample_snapshot(), l2);
  EXPECT_EQ(l2.basic.read_ops.ok, 2u);
  EXPECT_EQ(l2.read_size_kb_hist[10], 2u);
  EXPECT_EQ(l2.read_size_kb_hist[2], 0u);
  EXPECT_EQ(l2.write_size_kb_hist[2], 1u);
  EXPECT_EQ(l2.write_size_kb_hist[31], 0u);
}

TEST(CapiStatsFill, Level3FillsEachGpuFromItsRow) {
  cuda::CUuuid gpus[3];
  std::memset(gpus[0].bytes, 0xa1, 16);
  std::memset(gpus[1].bytes, 0xb2, 16);
  std::memset(gpus[2].bytes, 0xc3, 16);
  CUfileStatsLevel3_t l3;
  std::memset(&l3, 0xff, sizeof l3);
  capi::fill_stats_l3(sample_snapshot(), gpus, l3);
  EXPECT_EQ(l3.detailed.basic.write_ops.ok, 1u);
  EXPECT_EQ(l3.detailed.read_size_kb_hist[10], 2u);
  ASSERT_EQ(l3.num_gpus, 3u);
  const CUfilePerGpuStats_t& g0 = l3.per_gpu_stats[0];
  const CUfilePerGpuStats_t& g1 = l3.per_gpu_stats[1];
  EXPECT_EQ(std::memcmp(g0.uuid, gpus[0].bytes, 16), 0);
  EXPECT_EQ(std::memcmp(g1.uuid, gpus[1].bytes, 16), 0);
  EXPECT_EQ(g0.read_bytes, 2u << 20);
  EXPECT_EQ(g0.n_total_reads, 2u);
  EXPECT_EQ(g0.n_posix_reads, 2u);  // every gpufile IO is compat-mode IO in cuFile's terms
  EXPECT_EQ(g0.n_nvfs_reads, 0u);
  EXPECT_EQ(g0.n_p2p_reads, 0u);
  EXPECT_EQ(g0.n_reads_err, 1u);
  EXPECT_EQ(g0.writes_bytes, 0u);
  EXPECT_EQ(g0.read_bw_bytes_per_sec, 0u);  // not measured per GPU
  EXPECT_EQ(g1.read_bytes, 0u);
  EXPECT_EQ(g1.writes_bytes, 4096u);
  EXPECT_EQ(g1.n_total_writes, 1u);
  EXPECT_EQ(g1.n_posix_writes, 1u);
  EXPECT_EQ(g1.n_writes_err, 0u);
  // Registrations are not per GPU: all on the first GPU's entry.
  EXPECT_EQ(g0.n_mmap, 3u);
  EXPECT_EQ(g0.n_mmap_ok, 2u);
  EXPECT_EQ(g0.n_mmap_err, 1u);
  EXPECT_EQ(g0.n_mmap_free, 1u);
  EXPECT_EQ(g0.reg_bytes, 1u << 21);
  EXPECT_EQ(g1.n_mmap, 0u);
  // GPU 2 did no IO; the host row's 70,000 bytes are in no GPU's entry.
  EXPECT_EQ(l3.per_gpu_stats[2].read_bytes, 0u);
  EXPECT_EQ(l3.per_gpu_stats[2].n_total_reads, 0u);
  EXPECT_EQ(l3.per_gpu_stats[3].read_bytes, 0u);  // unused entries are zero
}

TEST_F(CapiTest, GetStatsL3ListsTheDriversGpus) {
  fake::set_gpu_count(3);
  fake::set_driver_open(true, Settings{});
  ASSERT_EQ(cuFileSetStatsLevel(3).err, CU_FILE_SUCCESS);
  stats::record_call(stats::Op::read, 4096, 1000, true);
  stats::record_device(stats::Op::read, 0, 4096, true);
  CUfileStatsLevel3_t l3;
  ASSERT_EQ(cuFileGetStatsL3(&l3).err, CU_FILE_SUCCESS);
  EXPECT_EQ(l3.num_gpus, 3u);
  EXPECT_EQ(l3.per_gpu_stats[2].uuid[0], 3);
  EXPECT_EQ(l3.per_gpu_stats[0].n_total_reads, 1u);
  EXPECT_EQ(l3.detailed.read_size_kb_hist[2], 1u);
  fake::set_gpu_count(0);
  ASSERT_EQ(cuFileGetStatsL3(&l3).err, CU_FILE_SUCCESS);
  EXPECT_EQ(l3.num_gpus, 0u);
}

}  // namespace
}  // namespace gpufile
