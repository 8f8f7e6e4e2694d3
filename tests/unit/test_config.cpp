// core/config: the layers of a driver session's Settings and the staging area of the
// parameter API.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"

namespace gpufile::config {
namespace {

namespace fs = std::filesystem;

// Every variable the resolver reads; the fixture clears them so that the caller's environment
// cannot leak into a test, and restores them afterwards.
const char* const kVariables[] = {
    "CUFILE_ENV_PATH_JSON", "CUFILE_LOGGING_LEVEL", "CUFILE_LOGFILE_PATH",
    "CUFILE_ALLOW_COMPAT_MODE", "CUFILE_FORCE_COMPAT_MODE", "CUFILE_USE_PCIP2PDMA",
    "CUFILE_SKIP_TOPOLOGY_DETECTION", "CUFILE_NVTX", "CUFILE_STREAM_MEMOPS_BYPASS",
    "GPUFILE_ENGINE", "GPUFILE_DIRECT_IO", "GPUFILE_CACHE_POLICY", "GPUFILE_WORKERS", "GPUFILE_SLAB_SIZE_KB",
    "GPUFILE_SLABS_PER_WORKER", "GPUFILE_COLD_SLABS_PER_WORKER", "GPUFILE_SHARED_PIECE_KB", "GPUFILE_COLD_PIECE_KB", "GPUFILE_RING_DEPTH", "GPUFILE_SMALL_IO_KB", "GPUFILE_LOG_LEVEL",
    "GPUFILE_LOG_FILE", "GPUFILE_NUMA_PLACEMENT", "GPUFILE_VENDOR", "GPUFILE_VENDOR_LIBRARY"};

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* v = getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
    dir_ = fs::temp_directory_path() /
           ("gpufile_config_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(dir_);
    write_json("{}");  // never read the machine's /etc/cufile.json
    clear_staged();
  }

  void TearDown() override {
    clear_staged();
    for (const char* name : kVariables) unsetenv(name);
    for (auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
    log::configure(Settings{});
    log::set_level(LogLevel::warn);
    stats::set_level(0);
    fs::remove_all(dir_);
  }

  void write_json(const std::string& text) {
    const fs::path path = dir_ / "cufile.json";
    std::ofstream(path) << text;
    setenv("CUFILE_ENV_PATH_JSON", path.c_str(), 1);
  }

  static bool mentions(const Problems& problems, const std::string& what) {
    for (const std::string& p : problems)
      if (p.find(what) != std::string::npos) return true;
    return false;
  }

  fs::path dir_;
  std::map<std::string, std::string> saved_;
  static inline int counter_ = 0;
};

// As NVIDIA ships it: // comments, nested sections, keys gpufile does not know.
constexpr const char* kCommentedJson = R"({
  // logging
  "logging": { "dir": "/var/log/x", "level": "DEBUG" },
  "profile": { "nvtx": false, "cufile_stats": 2 },
  "execution": {
    "max_io_queue_depth": 64,  // trailing comment
    "max_io_threads": 2,
    "parallel_io": false,
    "min_io_threshold_size_kb": 1024,
    "max_request_parallelism": 2
  },
  "properties": {
    "max_direct_io_size_kb": 1024,
    "max_device_cache_size_kb": 65536,
    "per_buffer_cache_size_kb": 2048,
    "max_device_pinned_mem_size_kb": 1048576,
    "use_poll_mode": true,
    "poll_mode_max_size_kb": 8,
    "allow_compat_mode": true,
    "io_batchsize": 64,
    "max_batch_io_timeout_msecs": 10,
    "posix_pool_slab_size_kb": [4, 2048],
    "posix_pool_slab_count": [32, 8],
    "rdma_dev_addr_list": [],
    "prefer_iouring": true
  },
  /* a block comment */
  "fs": { "generic": { "posix_unaligned_writes": false } },
  "miscellaneous": { "api_check_aggressive": true, "skip_topology_detection": true },
  "gpufile": { "engine": "posix", "direct_io": "never", "cache_policy": "keep", "workers": 3, "slab_size_kb": 1024,
               "slabs_per_worker": 8, "cold_slabs_per_worker": 12, "shared_piece_kb": 512, "cold_piece_kb": 1024, "ring_depth": 128,
               "small_io_kb": 16, "min_chunk_kb": 512 }
})";

TEST_F(ConfigTest, DefaultsWhenTheFileIsEmpty) {
  Resolution r = resolve();
  EXPECT_TRUE(r.problems.empty());
  const Settings d;
  EXPECT_EQ(r.settings.max_io_threads, d.max_io_threads);
  EXPECT_EQ(r.settings.max_direct_io_size_kb, d.max_direct_io_size_kb);
  EXPECT_EQ(r.settings.allow_compat_mode, d.allow_compat_mode);
  EXPECT_EQ(r.settings.log_level, LogLevel::error);
  EXPECT_EQ(r.settings.engine, EnginePolicy::automatic);
  EXPECT_EQ(r.settings.posix_pool_slab_size_kb, d.posix_pool_slab_size_kb);
}

TEST_F(ConfigTest, JsonWithCommentsSetsEveryKnownKey) {
  write_json(kCommentedJson);
  Resolution r = resolve();
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  const Settings& s = r.settings;
  EXPECT_EQ(s.log_dir, "/var/log/x");
  EXPECT_EQ(s.log_level, LogLevel::debug);
  EXPECT_EQ(s.stats_level, 2);
  EXPECT_EQ(s.max_io_queue_depth, 64u);
  EXPECT_EQ(s.max_io_threads, 2u);
  EXPECT_FALSE(s.parallel_io);
  EXPECT_EQ(s.min_io_threshold_size_kb, 1024u);
  EXPECT_EQ(s.max_request_parallelism, 2u);
  EXPECT_EQ(s.max_direct_io_size_kb, 1024u);
  EXPECT_EQ(s.max_device_cache_size_kb, 65536u);
  EXPECT_EQ(s.per_buffer_cache_size_kb, 2048u);
  EXPECT_EQ(s.max_device_pinned_mem_size_kb, 1048576u);
  EXPECT_TRUE(s.use_poll_mode);
  EXPECT_EQ(s.poll_mode_max_size_kb, 8u);
  EXPECT_EQ(s.io_batchsize, 64u);
  EXPECT_EQ(s.batch_io_timeout_ms, 10u);
  EXPECT_EQ(s.posix_pool_slab_size_kb, (std::vector<size_t>{4, 2048}));
  EXPECT_EQ(s.posix_pool_slab_count, (std::vector<size_t>{32, 8}));
  EXPECT_TRUE(s.prefer_io_uring);
  EXPECT_TRUE(s.api_check_aggressive);
  EXPECT_TRUE(s.skip_topology_detection);
  EXPECT_EQ(s.engine, EnginePolicy::posix);
  EXPECT_EQ(s.direct_io, DirectIoPolicy::never);
  EXPECT_EQ(s.cache_policy, CachePolicy::keep);
  EXPECT_EQ(s.workers, 3u);
  EXPECT_EQ(s.slab_size_kb, 1024u);
  EXPECT_EQ(s.slabs_per_worker, 8u);
  EXPECT_EQ(s.cold_slabs_per_worker, 12u);
  EXPECT_EQ(s.shared_piece_kb, 512u);
  EXPECT_EQ(s.cold_piece_kb, 1024u);
  EXPECT_EQ(s.ring_depth, 128u);
  EXPECT_EQ(s.small_io_threshold_kb, 16u);
  EXPECT_EQ(s.min_chunk_kb, 512u);
}

TEST_F(ConfigTest, PartialFileKeepsDefaultsForMissingKeys) {
  write_json(R"({ "execution": { "max_io_threads": 7 } })");
  Resolution r = resolve();
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.settings.max_io_threads, 7u);
  EXPECT_EQ(r.settings.max_io_queue_depth, Settings{}.max_io_queue_depth);
  EXPECT_EQ(r.settings.io_batchsize, Settings{}.io_batchsize);
}

TEST_F(ConfigTest, UnknownKeysAreIgnoredSilently) {
  write_json(R"({ "no_such_section": { "x": 1 }, "properties": { "no_such_key": "y",
                 "io_batchsize": 32 }, "gpufile": { "future_knob": true } })");
  Resolution r = resolve();
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.settings.io_batchsize, 32u);
}

TEST_F(ConfigTest, OutOfRangeAndWrongTypeKeepTheDefaultAndAreReported) {
  write_json(R"({
    "execution": { "max_io_threads": 99, "max_io_queue_depth": -1 },
    "properties": { "use_poll_mode": "yes", "max_direct_io_size_kb": 1002, "io_batchsize": 1.5,
                    "posix_pool_slab_size_kb": [4, 8], "posix_pool_slab_count": [1] },
    "logging": { "level": "LOUD" },
    "gpufile": { "engine": "spdk", "ring_depth": 0 }
  })");
  Resolution r = resolve();
  const Settings d;
  EXPECT_EQ(r.settings.max_io_threads, d.max_io_threads);
  EXPECT_EQ(r.settings.max_io_queue_depth, d.max_io_queue_depth);
  EXPECT_EQ(r.settings.use_poll_mode, d.use_poll_mode);
  EXPECT_EQ(r.settings.max_direct_io_size_kb, d.max_direct_io_size_kb);
  EXPECT_EQ(r.settings.io_batchsize, d.io_batchsize);
  EXPECT_EQ(r.settings.posix_pool_slab_size_kb, d.posix_pool_slab_size_kb);
  EXPECT_EQ(r.settings.log_level, d.log_level);
  EXPECT_EQ(r.settings.engine, d.engine);
  EXPECT_EQ(r.settings.ring_depth, d.ring_depth);
  EXPECT_EQ(r.problems.size(), 9u);
  // Each line names the key, the value and the allowed range.
  EXPECT_TRUE(mentions(r.problems, "execution.max_io_threads: 99 (allowed: 0..32); keeping 4"));
  EXPECT_TRUE(mentions(r.problems, "properties.max_direct_io_size_kb: 1002 (allowed: 64..16384, a multiple of 4)"));
  EXPECT_TRUE(mentions(r.problems, "properties.use_poll_mode: \"yes\""));
  EXPECT_TRUE(mentions(r.problems, "gpufile.engine: \"spdk\" (allowed: auto|io_uring|posix)"));
  EXPECT_TRUE(mentions(r.problems, "logging.level: \"LOUD\""));
}

TEST_F(ConfigTest, BrokenJsonFallsBackToDefaults) {
  write_json(R"({ "execution": { "max_io_threads": 2, } )");
  Resolution r = resolve();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("not valid JSON"), std::string::npos);
  EXPECT_EQ(r.settings.max_io_threads, Settings{}.max_io_threads);
}

// A value nested 200,000 levels deep on a known key overflowed the stack when its problem line
// dumped it (found by fuzzing). Such a file is refused whole, and so is such a staged value.
TEST_F(ConfigTest, DeeplyNestedJsonIsRefusedNotRecursedInto) {
  const size_t depth = 200000;
  write_json(R"({"profile": {"cufile_stats": )" + std::string(depth, '[') +
             std::string(depth, ']') + "}}");
  Resolution r = resolve();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("not valid JSON (nested deeper than 64 levels)"), std::string::npos)
      << r.problems[0];
  EXPECT_EQ(r.settings.stats_level, Settings{}.stats_level);
  // The limit is far above what a cufile.json needs: 60 levels is read, and reported as the
  // wrong type for the key.
  write_json(R"({"profile": {"cufile_stats": )" + std::string(60, '[') + std::string(60, ']') +
             "}}");
  r = resolve();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("invalid value for profile.cufile_stats"), std::string::npos)
      << r.problems[0];
  EXPECT_EQ(stage_json("profile.cufile_stats", std::string(depth, '[') + std::string(depth, ']')),
            "not a JSON value: nested deeper than 64 levels");
}

TEST_F(ConfigTest, MissingFileNamedByTheEnvironmentIsReported) {
  setenv("CUFILE_ENV_PATH_JSON", (dir_ / "absent.json").c_str(), 1);
  EXPECT_EQ(json_path(), (dir_ / "absent.json").string());
  Resolution r = resolve();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("cannot read"), std::string::npos);
}

TEST_F(ConfigTest, PrecedenceDefaultsJsonEnvironmentApi) {
  write_json(R"({
    // json overrides the defaults
    "properties": { "allow_compat_mode": false, "use_pci_p2pdma": true, "io_batchsize": 64 },
    "logging": { "level": "INFO" },
    "gpufile": { "workers": 3, "engine": "posix", "slab_size_kb": 512 }
  })");
  setenv("CUFILE_ALLOW_COMPAT_MODE", "true", 1);  // env beats json
  setenv("GPUFILE_WORKERS", "5", 1);
  setenv("CUFILE_LOGGING_LEVEL", "DEBUG", 1);
  setenv("GPUFILE_ENGINE", "io_uring", 1);
  ASSERT_TRUE(stage_bool(BoolParam::allow_compat_mode, false));  // API beats env
  ASSERT_TRUE(stage_size(SizeParam::io_batchsize, 16));          // API beats json
  ASSERT_TRUE(stage_string(StringParam::logging_level, "trace"));

  Resolution r = resolve();
  EXPECT_TRUE(r.problems.empty());
  EXPECT_FALSE(r.settings.allow_compat_mode);                // api
  EXPECT_EQ(r.settings.io_batchsize, 16u);                   // api
  EXPECT_EQ(r.settings.log_level, LogLevel::trace);          // api
  EXPECT_EQ(r.settings.workers, 5u);                         // env
  EXPECT_EQ(r.settings.engine, EnginePolicy::io_uring);      // env
  EXPECT_TRUE(r.settings.use_pci_p2pdma);                    // json
  EXPECT_EQ(r.settings.slab_size_kb, 512u);                  // json
  EXPECT_EQ(r.settings.max_io_threads, Settings{}.max_io_threads);  // default

  clear_staged();
  r = resolve();
  EXPECT_TRUE(r.settings.allow_compat_mode);  // env again
  EXPECT_EQ(r.settings.log_level, LogLevel::debug);
}

TEST_F(ConfigTest, GpufileLogVariablesBeatCufileOnes) {
  setenv("CUFILE_LOGGING_LEVEL", "DEBUG", 1);
  setenv("GPUFILE_LOG_LEVEL", "notice", 1);
  setenv("CUFILE_LOGFILE_PATH", "/tmp/a.log", 1);
  setenv("GPUFILE_LOG_FILE", "/tmp/b.log", 1);
  Settings s = resolve().settings;
  EXPECT_EQ(s.log_level, LogLevel::notice);
  EXPECT_EQ(s.log_file, "/tmp/b.log");
}

TEST_F(ConfigTest, EnvironmentBoolsAcceptTheUsualSpellings) {
  const std::pair<const char*, bool> cases[] = {
      {"true", true}, {"TRUE", true}, {"1", true}, {"yes", true}, {"Yes", true}, {"on", true},
      {"ON", true}, {"false", false}, {"False", false}, {"0", false}, {"no", false}, {"NO", false},
      {"off", false}, {"Off", false}};
  for (auto [text, value] : cases) {
    setenv("CUFILE_FORCE_COMPAT_MODE", text, 1);
    setenv("CUFILE_ALLOW_COMPAT_MODE", text, 1);
    Resolution r = resolve();
    EXPECT_TRUE(r.problems.empty()) << text;
    EXPECT_EQ(r.settings.force_compat_mode, value) << text;
    EXPECT_EQ(r.settings.allow_compat_mode, value) << text;
  }
}

TEST_F(ConfigTest, EveryCufileVariableReachesItsField) {
  setenv("CUFILE_USE_PCIP2PDMA", "1", 1);
  setenv("CUFILE_SKIP_TOPOLOGY_DETECTION", "yes", 1);
  setenv("CUFILE_NVTX", "on", 1);
  setenv("CUFILE_STREAM_MEMOPS_BYPASS", "true", 1);
  setenv("CUFILE_LOGFILE_PATH", "/tmp/cufile-test.log", 1);
  setenv("GPUFILE_DIRECT_IO", "ALWAYS", 1);
  setenv("GPUFILE_CACHE_POLICY", "Bypass", 1);
  setenv("GPUFILE_SLAB_SIZE_KB", "2048", 1);
  setenv("GPUFILE_SLABS_PER_WORKER", "2", 1);
  setenv("GPUFILE_COLD_SLABS_PER_WORKER", "0", 1);
  setenv("GPUFILE_SHARED_PIECE_KB", "256", 1);
  setenv("GPUFILE_COLD_PIECE_KB", "512", 1);
  setenv("GPUFILE_RING_DEPTH", "256", 1);
  setenv("GPUFILE_SMALL_IO_KB", "0", 1);
  Resolution r = resolve();
  EXPECT_TRUE(r.problems.empty());
  EXPECT_TRUE(r.settings.use_pci_p2pdma);
  EXPECT_TRUE(r.settings.skip_topology_detection);
  EXPECT_TRUE(r.settings.nvtx);
  EXPECT_TRUE(r.settings.stream_memops_bypass);
  EXPECT_EQ(r.settings.log_file, "/tmp/cufile-test.log");
  EXPECT_EQ(r.settings.direct_io, DirectIoPolicy::always);
  EXPECT_EQ(r.settings.cache_policy, CachePolicy::bypass);
  EXPECT_EQ(r.settings.slab_size_kb, 2048u);
  EXPECT_EQ(r.settings.slabs_per_worker, 2u);
  EXPECT_EQ(r.settings.cold_slabs_per_worker, 0u);
  EXPECT_EQ(r.settings.shared_piece_kb, 256u);
  EXPECT_EQ(r.settings.cold_piece_kb, 512u);
  EXPECT_EQ(r.settings.ring_depth, 256u);
  EXPECT_EQ(r.settings.small_io_threshold_kb, 0u);
}

TEST_F(ConfigTest, BadEnvironmentValuesKeepTheLowerLayerAndAreReported) {
  write_json(R"({ "gpufile": { "workers": 3 } })");
  setenv("CUFILE_ALLOW_COMPAT_MODE", "maybe", 1);
  setenv("GPUFILE_WORKERS", "-2", 1);
  setenv("GPUFILE_SLAB_SIZE_KB", "1002", 1);  // not a multiple of 4
  setenv("GPUFILE_DIRECT_IO", "sometimes", 1);
  setenv("GPUFILE_CACHE_POLICY", "forever", 1);
  setenv("GPUFILE_RING_DEPTH", "", 1);  // empty counts as unset
  Resolution r = resolve();
  EXPECT_TRUE(r.settings.allow_compat_mode);
  EXPECT_EQ(r.settings.workers, 3u);  // the json value, not the default
  EXPECT_EQ(r.settings.slab_size_kb, Settings{}.slab_size_kb);
  EXPECT_EQ(r.settings.direct_io, DirectIoPolicy::automatic);
  EXPECT_EQ(r.settings.cache_policy, CachePolicy::automatic);
  EXPECT_EQ(r.problems.size(), 5u);
  EXPECT_TRUE(mentions(r.problems, "GPUFILE_CACHE_POLICY: forever (allowed: auto|keep|bypass"));
  EXPECT_TRUE(mentions(r.problems, "CUFILE_ALLOW_COMPAT_MODE: maybe"));
  EXPECT_TRUE(mentions(r.problems, "GPUFILE_WORKERS: -2"));
  EXPECT_TRUE(mentions(r.problems, "keeping 3"));
}

TEST_F(ConfigTest, StagedValuesAreNotCheckedUntilOpen) {
  // As cuFile: Set accepts anything, Get shows it, the open reports it and keeps the default.
  ASSERT_TRUE(stage_size(SizeParam::max_io_threads, 99));
  EXPECT_EQ(staged_size(SizeParam::max_io_threads), 99u);
  Resolution r = resolve();
  EXPECT_EQ(r.settings.max_io_threads, Settings{}.max_io_threads);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("cuFileSetParameter: invalid value for execution.max_io_threads: 99 "
                               "(allowed: 0..32)"),
            std::string::npos);
}

TEST_F(ConfigTest, ResolveForOpenClearsStagedValuesAndLogsProblems) {
  const fs::path log_path = dir_ / "gpufile.log";
  setenv("GPUFILE_LOG_FILE", log_path.c_str(), 1);
  ASSERT_TRUE(stage_size(SizeParam::io_batchsize, 32));
  ASSERT_TRUE(stage_size(SizeParam::poll_threshold_size_kb, 3));  // below the minimum 4
  ASSERT_TRUE(stage_bool(BoolParam::use_poll_mode, true));
  ASSERT_TRUE(stage_size(SizeParam::profile_stats, 2));  // what cuFileSetStatsLevel stages

  Settings s = resolve_for_open();
  EXPECT_EQ(stats::level(), 2);  // applied process-wide, with the log settings
  EXPECT_EQ(s.io_batchsize, 32u);
  EXPECT_TRUE(s.use_poll_mode);
  EXPECT_EQ(s.poll_mode_max_size_kb, Settings{}.poll_mode_max_size_kb);

  // Cleared: a closed driver reports unstaged values again, and the next open has none.
  EXPECT_EQ(staged_size(SizeParam::io_batchsize), 0u);
  EXPECT_FALSE(staged_bool(BoolParam::use_poll_mode));
  EXPECT_EQ(resolve().settings.io_batchsize, Settings{}.io_batchsize);

  std::ifstream in(log_path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("properties.poll_mode_max_size_kb: 3 (allowed: 4.."), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("gpufile ERROR "), std::string::npos);
}

TEST_F(ConfigTest, ClosedDriverReportsCufilesUnstagedValues) {
  // Observed on NVIDIA's libcufile 1.15.1 (CUDA 13) before open, in the conformance harness's
  // record (tests/conformance/expected/nvidia.txt, section params-closed).
  EXPECT_EQ(staged_size(SizeParam::max_io_threads), 0u);
  EXPECT_EQ(staged_size(SizeParam::min_io_threshold_size_kb), 1024u);
  EXPECT_EQ(staged_size(SizeParam::max_request_parallelism), 0u);
  EXPECT_EQ(staged_size(SizeParam::max_direct_io_size_kb), 0u);
  EXPECT_EQ(staged_size(SizeParam::max_device_cache_size_kb), 0u);
  EXPECT_EQ(staged_size(SizeParam::per_buffer_cache_size_kb), 0u);
  EXPECT_EQ(staged_size(SizeParam::max_device_pinned_mem_size_kb), 0u);
  EXPECT_EQ(staged_size(SizeParam::io_batchsize), 0u);
  EXPECT_EQ(staged_size(SizeParam::poll_threshold_size_kb), 0u);
  EXPECT_EQ(staged_size(SizeParam::batch_io_timeout_ms), 0u);
  EXPECT_EQ(staged_size(SizeParam::max_io_queue_depth), 128u);
  EXPECT_EQ(staged_size(SizeParam::profile_stats), 0u);
  EXPECT_FALSE(staged_bool(BoolParam::allow_compat_mode));
  EXPECT_FALSE(staged_bool(BoolParam::parallel_io));
  EXPECT_FALSE(staged_bool(BoolParam::allow_system_memory));
  EXPECT_FALSE(staged_bool(BoolParam::profile_nvtx));
  EXPECT_EQ(staged_string(StringParam::log_dir), "");
  EXPECT_EQ(staged_string(StringParam::env_logfile_path), "");
  EXPECT_EQ(staged_string(StringParam::logging_level), "");
  setenv("CUFILE_LOGGING_LEVEL", "INFO", 1);
  setenv("CUFILE_LOGFILE_PATH", "/x/y.log", 1);
  EXPECT_EQ(staged_string(StringParam::logging_level), "INFO");
  EXPECT_EQ(staged_string(StringParam::env_logfile_path), "/x/y.log");
  const PosixPool pool = staged_posix_pool();
  EXPECT_TRUE(pool.slab_size_kb.empty());
  EXPECT_TRUE(pool.slab_count.empty());
  // What the open will use is another matter: the defaults.
  EXPECT_TRUE(resolve().settings.allow_compat_mode);
  EXPECT_EQ(resolve().settings.posix_pool_slab_count, (std::vector<size_t>{128, 64, 64}));
}

TEST_F(ConfigTest, StagingRoundTripsAndLastSetWins) {
  EXPECT_TRUE(stage_size(SizeParam::max_direct_io_size_kb, 512));
  EXPECT_TRUE(stage_size(SizeParam::max_direct_io_size_kb, 1024));
  EXPECT_EQ(staged_size(SizeParam::max_direct_io_size_kb), 1024u);
  EXPECT_TRUE(stage_bool(BoolParam::profile_nvtx, true));
  EXPECT_TRUE(staged_bool(BoolParam::profile_nvtx));
  EXPECT_TRUE(stage_string(StringParam::log_dir, "/var/tmp"));
  EXPECT_EQ(staged_string(StringParam::log_dir), "/var/tmp");
  const size_t sizes[] = {8, 64};
  const size_t counts[] = {16, 4};
  EXPECT_TRUE(stage_posix_pool(sizes, counts));
  EXPECT_EQ(staged_posix_pool().slab_size_kb, (std::vector<size_t>{8, 64}));
  Settings s = resolve().settings;
  EXPECT_EQ(s.max_direct_io_size_kb, 1024u);
  EXPECT_TRUE(s.nvtx);
  EXPECT_EQ(s.log_dir, "/var/tmp");
  EXPECT_EQ(s.posix_pool_slab_count, (std::vector<size_t>{16, 4}));
}

TEST_F(ConfigTest, StagingRefusesUnknownParametersAndBadArrays) {
  EXPECT_FALSE(stage_size(SizeParam::count, 1));
  EXPECT_FALSE(stage_size(static_cast<SizeParam>(-1), 1));
  EXPECT_FALSE(stage_bool(static_cast<BoolParam>(99), true));
  EXPECT_FALSE(stage_string(StringParam::count, "x"));
  const size_t one[] = {4};
  const size_t two[] = {4, 8};
  EXPECT_FALSE(stage_posix_pool(one, two));
  EXPECT_FALSE(stage_posix_pool({}, {}));
}

TEST_F(ConfigTest, OpenSettingsAreReportedAsTheyAre) {
  Settings s;
  s.max_io_threads = 9;
  s.stats_level = 3;
  s.prefer_io_uring = true;
  s.log_level = LogLevel::notice;
  s.log_file = "/l/f";
  s.log_dir = "/l";
  EXPECT_EQ(size_value(s, SizeParam::max_io_threads), 9u);
  EXPECT_EQ(size_value(s, SizeParam::profile_stats), 3u);
  EXPECT_EQ(size_value(s, SizeParam::batch_io_timeout_ms), 5u);
  EXPECT_TRUE(bool_value(s, BoolParam::prefer_io_uring));
  EXPECT_EQ(string_value(s, StringParam::logging_level), "NOTICE");
  EXPECT_EQ(string_value(s, StringParam::env_logfile_path), "/l/f");
  EXPECT_EQ(string_value(s, StringParam::log_dir), "/l");
}

TEST_F(ConfigTest, RangesMatchCufile) {
  auto range = [](SizeParam p) { return size_range(p).value(); };
  EXPECT_FALSE(size_range(SizeParam::profile_stats));
  EXPECT_FALSE(size_range(SizeParam::count));
  EXPECT_EQ(range(SizeParam::max_io_queue_depth).min, 1u);
  EXPECT_EQ(range(SizeParam::max_io_queue_depth).max, 256u);
  EXPECT_EQ(range(SizeParam::max_io_threads).max, 32u);
  EXPECT_EQ(range(SizeParam::min_io_threshold_size_kb).min, 4u);
  EXPECT_EQ(range(SizeParam::min_io_threshold_size_kb).max, 4294967295u);
  EXPECT_EQ(range(SizeParam::max_request_parallelism).max, 8u);
  EXPECT_EQ(range(SizeParam::max_direct_io_size_kb).min, 64u);
  EXPECT_EQ(range(SizeParam::max_direct_io_size_kb).max, 16384u);
  EXPECT_EQ(range(SizeParam::max_device_cache_size_kb).max, kBarDependentMaxKb);
  EXPECT_EQ(range(SizeParam::per_buffer_cache_size_kb).min, 64u);
  EXPECT_EQ(range(SizeParam::max_device_pinned_mem_size_kb).min, 64u);
  EXPECT_EQ(range(SizeParam::io_batchsize).max, 256u);
  EXPECT_EQ(range(SizeParam::poll_threshold_size_kb).min, 4u);
  EXPECT_EQ(range(SizeParam::poll_threshold_size_kb).max, 18014398509481980u);
  EXPECT_EQ(range(SizeParam::batch_io_timeout_ms).min, 1u);
  EXPECT_EQ(range(SizeParam::batch_io_timeout_ms).max, 1000u);
  // Every default lies inside its own range.
  const Settings d;
  for (int i = 1; i < static_cast<int>(SizeParam::count); ++i) {
    auto p = static_cast<SizeParam>(i);
    EXPECT_GE(size_value(d, p), range(p).min) << i;
    EXPECT_LE(size_value(d, p), range(p).max) << i;
  }
}

TEST(ConfigParse, Sizes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("16384"), 16384u);
  EXPECT_EQ(parse_size("18446744073709551615"), static_cast<size_t>(-1));
  EXPECT_FALSE(parse_size("18446744073709551616"));
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size("+1"));
  EXPECT_FALSE(parse_size("12k"));
  EXPECT_FALSE(parse_size(" 1"));
}

TEST_F(ConfigTest, NumaPlacementFromJsonAndEnvironment) {
  EXPECT_EQ(resolve().settings.numa_placement, NumaPlacement::automatic);
  write_json(R"({ "gpufile": { "numa_placement": "off" } })");
  EXPECT_EQ(resolve().settings.numa_placement, NumaPlacement::off);
  setenv("GPUFILE_NUMA_PLACEMENT", "AUTO", 1);
  EXPECT_EQ(resolve().settings.numa_placement, NumaPlacement::automatic);
  setenv("GPUFILE_NUMA_PLACEMENT", "node1", 1);
  Resolution r = resolve();
  EXPECT_EQ(r.settings.numa_placement, NumaPlacement::off);  // the json value is kept
  EXPECT_TRUE(mentions(r.problems, "GPUFILE_NUMA_PLACEMENT: node1 (allowed: auto|off)"));
  EXPECT_NE(settings_json(r.settings).find(R"("gpufile.numa_placement":"off")"), std::string::npos);
}

TEST_F(ConfigTest, VendorPathFromJsonAndEnvironment) {
  EXPECT_EQ(resolve().settings.vendor, VendorPolicy::automatic);
  EXPECT_EQ(resolve().settings.vendor_library, "");
  write_json(R"({ "gpufile": { "vendor": "off", "vendor_library": "/opt/nv/libcufile.so.0" } })");
  EXPECT_EQ(resolve().settings.vendor, VendorPolicy::off);
  EXPECT_EQ(resolve().settings.vendor_library, "/opt/nv/libcufile.so.0");
  setenv("GPUFILE_VENDOR", "On", 1);
  setenv("GPUFILE_VENDOR_LIBRARY", "/usr/local/cuda/lib64/libcufile.so.0", 1);
  Resolution r = resolve();
  EXPECT_EQ(r.settings.vendor, VendorPolicy::on);
  EXPECT_EQ(r.settings.vendor_library, "/usr/local/cuda/lib64/libcufile.so.0");
  EXPECT_NE(settings_json(r.settings).find(R"("gpufile.vendor":"on")"), std::string::npos);
  setenv("GPUFILE_VENDOR", "sometimes", 1);
  r = resolve();
  EXPECT_EQ(r.settings.vendor, VendorPolicy::off);  // the json value is kept
  EXPECT_TRUE(mentions(r.problems, "GPUFILE_VENDOR: sometimes (allowed: auto|on|off)"));
  write_json(R"({ "gpufile": { "vendor_library": 7 } })");
  EXPECT_TRUE(mentions(resolve().problems, "gpufile.vendor_library"));
}

TEST(ConfigParse, BoolsAndChoices) {
  EXPECT_EQ(parse_bool("oN"), true);
  EXPECT_EQ(parse_bool("nO"), false);
  EXPECT_FALSE(parse_bool("2"));
  EXPECT_FALSE(parse_bool(""));
  EXPECT_FALSE(parse_bool("truee"));
  EXPECT_EQ(parse_engine("AUTO"), EnginePolicy::automatic);
  EXPECT_EQ(parse_engine("io_uring"), EnginePolicy::io_uring);
  EXPECT_EQ(parse_engine("Posix"), EnginePolicy::posix);
  EXPECT_FALSE(parse_engine("aio"));
  EXPECT_EQ(parse_direct_io("never"), DirectIoPolicy::never);
  EXPECT_FALSE(parse_direct_io("maybe"));
  EXPECT_STREQ(engine_name(EnginePolicy::io_uring), "io_uring");
  EXPECT_STREQ(direct_io_name(DirectIoPolicy::always), "always");
  EXPECT_EQ(parse_cache_policy("KEEP"), CachePolicy::keep);
  EXPECT_EQ(parse_cache_policy("auto"), CachePolicy::automatic);
  EXPECT_FALSE(parse_cache_policy("always"));
  EXPECT_STREQ(cache_policy_name(CachePolicy::bypass), "bypass");
  EXPECT_STREQ(cache_policy_name(Settings{}.cache_policy), "auto");
}

}  // namespace
}  // namespace gpufile::config
