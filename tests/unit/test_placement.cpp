// NUMA placement (src/exec/placement.hpp) and the budgets of processes sharing a host
// (src/exec/budget.hpp): the CPU-list parser, sysfs read from a fake tree, the placement decision
// as a table, and the automatic budget from the launchers' environment.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "exec/budget.hpp"
#include "cuda/memory.hpp"
#include "exec/executor.hpp"
#include "exec/placement.hpp"
#include "sys/os.hpp"

namespace fs = std::filesystem;
using namespace gpufile::exec;

namespace {

std::vector<int> range(int lo, int hi) {
  std::vector<int> out;
  for (int i = lo; i <= hi; ++i) out.push_back(i);
  return out;
}

TEST(CpuList, ParsesTheKernelFormat) {
  std::vector<int> cpus;
  ASSERT_TRUE(parse_cpu_list("0-3,8,10-11\n", &cpus));
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  ASSERT_TRUE(parse_cpu_list("5", &cpus));
  EXPECT_EQ(cpus, std::vector<int>{5});
  ASSERT_TRUE(parse_cpu_list("8-9,0-1,1", &cpus));  // unordered and repeated: sorted, once each
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 8, 9}));
  ASSERT_TRUE(parse_cpu_list("\n", &cpus));  // a node without CPUs
  EXPECT_TRUE(cpus.empty());
}

TEST(CpuList, RefusesAnythingElse) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1,", "0-99999999", "1 2", "0x3", "-1\n"}) {
    std::vector<int> cpus{42};
    EXPECT_FALSE(parse_cpu_list(bad, &cpus)) << bad;
    EXPECT_TRUE(cpus.empty()) << bad;
  }
}

TEST(CpuList, TextFoldsRanges) {
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list_text({7}), "7");
  EXPECT_EQ(cpu_list_text({}), "none");
}

// A sysfs tree in a temporary directory.
class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gpufile-sysfs-" + std::to_string(getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  std::string root() const { return root_.string(); }
  fs::path root_;
};

TEST_F(FakeSysfs, ReadsAGpusNodeAndCpus) {
  write("bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  write("bus/pci/devices/0000:17:00.0/local_cpulist", "16-31\n");
  write("devices/system/node/online", "0-1\n");
  GpuSite s = read_gpu_site(root(), 3, "0000:17:00.0");
  EXPECT_EQ(s.gpu, 3);
  EXPECT_EQ(s.node, 1);
  EXPECT_EQ(s.cpus, range(16, 31));
  EXPECT_EQ(online_nodes(root()), (std::vector<int>{0, 1}));
}

TEST_F(FakeSysfs, MissingOrUnknownStaysUnknown) {
  write("bus/pci/devices/0000:18:00.0/numa_node", "-1\n");  // what a one-node machine says
  write("bus/pci/devices/0000:18:00.0/local_cpulist", "garbage");
  GpuSite s = read_gpu_site(root(), 0, "0000:18:00.0");
  EXPECT_EQ(s.node, -1);
  EXPECT_TRUE(s.cpus.empty());
  GpuSite none = read_gpu_site(root(), 1, "0000:99:00.0");  // no entry at all (the test double)
  EXPECT_EQ(none.node, -1);
  EXPECT_TRUE(none.cpus.empty());
  EXPECT_EQ(online_nodes(root()), std::vector<int>{0});  // no node directory: one node
}

GpuSite gpu(int ordinal, int node, std::vector<int> cpus) {
  return GpuSite{ordinal, "0000:00:00.0", node, std::move(cpus)};
}

// Two sockets of 32 CPUs, four GPUs on each (the 8-GPU host of issue 13).
std::vector<GpuSite> eight_gpus() {
  std::vector<GpuSite> g;
  for (int i = 0; i < 8; ++i) g.push_back(gpu(i, i / 4, i < 4 ? range(0, 31) : range(32, 63)));
  return g;
}

struct Group {
  int node;
  unsigned workers;
  uint64_t gpus;
  bool pinned;
};

std::vector<Group> groups(const Placement& p) {
  std::vector<Group> out;
  for (const WorkerGroup& g : p.groups) out.push_back({g.node, g.workers, g.gpus, !g.cpus.empty()});
  return out;
}

TEST(PlanPlacement, Table) {
  constexpr uint64_t kAny = ~uint64_t{0};
  struct Row {
    const char* what;
    std::vector<GpuSite> served;
    size_t nodes;
    unsigned workers;
    bool enabled;
    std::vector<Group> want;
    const char* why_has;
  };
  const std::vector<Row> rows = {
      {"placement off", eight_gpus(), 2, 16, false, {{-1, 16, kAny, false}}, "off (gpufile.numa_placement)"},
      {"one node", {gpu(0, 0, range(0, 15)), gpu(1, 0, range(0, 15))}, 1, 12, true,
       {{-1, 12, kAny, false}}, "one NUMA node"},
      {"no sysfs entry (the test double)", {gpu(0, -1, {}), gpu(1, -1, {})}, 2, 8, true,
       {{-1, 8, kAny, false}}, "unknown"},
      {"no GPU", {}, 2, 8, true, {{-1, 8, kAny, false}}, "no GPU"},
      {"eight GPUs on two sockets", eight_gpus(), 2, 16, true,
       {{0, 8, 0x0f, true}, {1, 8, 0xf0, true}}, "8 GPU(s) on 2 of 2 NUMA nodes"},
      {"odd workers: the rest to the first node", eight_gpus(), 2, 5, true,
       {{0, 3, 0x0f, true}, {1, 2, 0xf0, true}}, "node 0 3 worker(s) on CPUs 0-31"},
      {"one process per GPU: its GPU's node only", {gpu(5, 1, range(32, 63))}, 2, 6, true,
       {{1, 6, 0x20, true}}, "1 GPU(s) on 1 of 2 NUMA nodes"},
      {"uneven: three GPUs on node 0, one on node 1",
       {gpu(0, 0, range(0, 7)), gpu(1, 0, range(0, 7)), gpu(2, 0, range(0, 7)), gpu(3, 1, range(8, 15))},
       2, 8, true, {{0, 6, 0x7, true}, {1, 2, 0x8, true}}, "4 GPU(s)"},
      {"a GPU of unknown place is served by all, the others placed",
       {gpu(0, 0, range(0, 7)), gpu(1, -1, {}), gpu(2, 1, range(8, 15))}, 2, 4, true,
       {{0, 2, 0x1, true}, {1, 2, 0x4, true}}, "2 GPU(s)"},
      {"fewer workers than nodes", eight_gpus(), 2, 1, true, {{0, 1, 0x0f, true}}, "node 0 1 worker"},
  };
  // The CPUs the application allows (taskset, numactl, cpuset) limit the pinning.
  {
    const Placement p = plan_placement(eight_gpus(), 2, 4, true, range(24, 39));
    ASSERT_EQ(p.groups.size(), 2u);
    EXPECT_EQ(p.groups[0].cpus, range(24, 31));
    EXPECT_EQ(p.groups[1].cpus, range(32, 39));
    const Placement only0 = plan_placement(eight_gpus(), 2, 4, true, range(0, 3));
    ASSERT_EQ(only0.groups.size(), 2u);
    EXPECT_EQ(only0.groups[0].cpus, range(0, 3));
    EXPECT_TRUE(only0.groups[1].cpus.empty());  // node 1's workers: not pinned against the app's wish
    EXPECT_EQ(only0.groups[1].node, 1);         // (their staging still asked of node 1)
    EXPECT_NE(only0.why.find("node 1 2 worker(s) unpinned"), std::string::npos) << only0.why;
  }
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    const Placement p = plan_placement(r.served, r.nodes, r.workers, r.enabled);
    const std::vector<Group> got = groups(p);
    ASSERT_EQ(got.size(), r.want.size());
    unsigned total = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].node, r.want[i].node) << i;
      EXPECT_EQ(got[i].workers, r.want[i].workers) << i;
      EXPECT_EQ(got[i].gpus, r.want[i].gpus) << i;
      EXPECT_EQ(got[i].pinned, r.want[i].pinned) << i;
      total += got[i].workers;
    }
    EXPECT_EQ(total, r.workers);
    EXPECT_NE(p.why.find(r.why_has), std::string::npos) << p.why;
  }
}

TEST(PlanPlacement, GroupsAreOnTheirGpusCpus) {
  const Placement p = plan_placement(eight_gpus(), 2, 16, true);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].cpus, range(0, 31));
  EXPECT_EQ(p.groups[1].cpus, range(32, 63));
}

TEST(ServedGpus, OneProcessPerGpuServesItsLocalRanksGpu) {
  const auto all = eight_gpus();
  ASSERT_EQ(served_gpus(all, 8, 5).size(), 1u);
  EXPECT_EQ(served_gpus(all, 8, 5)[0].gpu, 5);
  EXPECT_EQ(served_gpus(all, 1, 0).size(), 8u);    // alone: every GPU it sees
  EXPECT_EQ(served_gpus(all, 8, -1).size(), 8u);   // rank unknown
  EXPECT_EQ(served_gpus({all[0], all[1]}, 4, 1).size(), 2u);  // fewer GPUs than processes
}

// ---- budgets ----------------------------------------------------------------------------------

std::map<std::string, std::string>* g_env = nullptr;

const char* fake_getenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}

unsigned world_with(std::map<std::string, std::string> env) {
  g_env = &env;
  return local_world_size(fake_getenv);
}

int rank_with(std::map<std::string, std::string> env) {
  g_env = &env;
  return local_rank(fake_getenv);
}

TEST(Budget, LocalWorldSizeFromTheLaunchers) {
  EXPECT_EQ(world_with({}), 1u);
  EXPECT_EQ(world_with({{"LOCAL_WORLD_SIZE", "8"}}), 8u);                // torchrun
  EXPECT_EQ(world_with({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}), 4u);      // Open MPI
  EXPECT_EQ(world_with({{"MPI_LOCALNRANKS", "2"}}), 2u);                 // MPICH
  EXPECT_EQ(world_with({{"LOCAL_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}), 2u);
  for (const char* bad : {"", "0", "-2", "two", "3x", "99999999999"})
    EXPECT_EQ(world_with({{"LOCAL_WORLD_SIZE", bad}}), 1u) << bad;
  EXPECT_EQ(world_with({{"LOCAL_WORLD_SIZE", "x"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}), 4u);
  EXPECT_EQ(rank_with({}), -1);
  EXPECT_EQ(rank_with({{"LOCAL_RANK", "3"}}), 3);
  EXPECT_EQ(rank_with({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}), 0);
  EXPECT_EQ(rank_with({{"LOCAL_RANK", "-1"}}), -1);
}

TEST(Budget, NProcessesTogetherGetAboutWhatOneGets) {
  struct Row {
    unsigned cores, world, workers, caller_slabs, small_buffers;
  };
  const Row rows[] = {
      {16, 1, 12, 32, 64},   // the lent H100 machine, alone: as measured
      {16, 2, 6, 16, 32},    // two processes: 12 workers together
      {32, 2, 12, 32, 64},   // the two-GPU H200 machine
      {2, 1, 4, 8, 64},      // small machines keep the floor of a process alone
      {2, 4, 2, 4, 16},      // ... and of a shared one
      {128, 8, 12, 32, 64},  // eight GPUs on 128 cores: 16 cores each
      {256, 1, 16, 512, 1024},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(std::to_string(r.cores) + " cores, " + std::to_string(r.world) + " processes");
    const Budget b = automatic_budget(r.cores, r.world);
    EXPECT_EQ(b.workers, r.workers);
    EXPECT_EQ(b.caller_slabs, r.caller_slabs);
    EXPECT_EQ(b.small_buffers, r.small_buffers);
  }
  // Together never much more than one process alone on hosts where the floors do not bind.
  for (unsigned world : {2u, 4u, 8u}) {
    const Budget one = automatic_budget(64, 1), each = automatic_budget(64, world);
    EXPECT_LE(each.caller_slabs * world, one.caller_slabs);
    EXPECT_LE(each.workers * world, one.workers * 3);  // one alone is capped at 16 (48 cores' worth)
  }
}

TEST(PageCacheDmaBudget, PerGpuFedSharedByAWorldThatSeesThemAllAndAnEighthOfMemoryAtMost) {
  constexpr uint64_t GiB = 1ull << 30;
  struct Row {
    const char* what;
    unsigned devices, world;
    uint64_t memory, want;
  };
  const Row rows[] = {
      {"one GPU", 1, 1, 128 * GiB, 8 * GiB},
      {"one process for four GPUs", 4, 1, 512 * GiB, 32 * GiB},
      {"four processes that each see all four", 4, 4, 512 * GiB, 8 * GiB},
      {"four processes that each see one (CUDA_VISIBLE_DEVICES)", 1, 4, 512 * GiB, 8 * GiB},
      {"eight GPUs, two processes", 8, 2, 2048 * GiB, 32 * GiB},
      {"an eighth of memory bounds it", 4, 1, 64 * GiB, 8 * GiB},
      {"a small machine", 1, 1, 24 * GiB, 3 * GiB},
      {"no GPU counted", 0, 1, 128 * GiB, 8 * GiB},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    EXPECT_EQ(pagecache_dma_budget(8 * GiB, r.devices, r.world, r.memory), r.want);
  }
  EXPECT_EQ(pagecache_dma_budget(0, 4, 1, 512 * GiB), 0u) << "0 keeps the path off";
}

TEST(SharedPieces, StagingInFlightOnTheHostKeptWithinAThirdOfTheLastLevelCache) {
  constexpr uint64_t KiB = 1 << 10, MiB = 1 << 20;
  struct Row {
    const char* what;
    uint64_t setting, cache;
    unsigned processes, workers;
    uint64_t want;
  };
  const Row rows[] = {
      {"a process alone: whole slabs", 0, 300 * MiB, 0, 12, 0},
      {"four H200s' processes: 96 pieces in 100 MiB", 0, 300 * MiB, 4, 12, 1 * MiB},
      {"two processes", 0, 300 * MiB, 2, 12, 2 * MiB},
      {"eight processes", 0, 300 * MiB, 8, 12, 512 * KiB},
      {"one process feeding several GPUs: 32 pieces in 100 MiB", 0, 300 * MiB, 1, 16, 2 * MiB},
      {"a small cache: no piece below 256 KiB", 0, 32 * MiB, 8, 16, 256 * KiB},
      {"a large cache: no piece above the slab", 0, 2048 * MiB, 2, 4, 0},
      {"the cache size unknown", 0, 0, 4, 12, 0},
      {"set: whatever the cache", 512 * KiB, 0, 2, 12, 512 * KiB},
      {"set no smaller than the slab: whole slabs", 4 * MiB, 300 * MiB, 4, 12, 0},
      {"set, but nobody known to share", 512 * KiB, 300 * MiB, 0, 12, 0},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    EXPECT_EQ(shared_piece_bytes(r.setting, r.cache, r.processes, r.workers, 2, 4 * MiB), r.want);
  }
}

}  // namespace

// ---- the executor applies a placement ------------------------------------------------------------


namespace {

// Records the placement calls instead of making them; says every page landed on node 1.
class PlacementOs : public gpufile::sys::Os {
 public:
  int set_thread_affinity(const int* cpus, size_t count) override {
    std::lock_guard lock(mu);
    pinned.emplace_back(cpus, cpus + count);
    return refuse_pinning ? -EPERM : 0;
  }
  int prefer_node(void*, size_t, int node) override {
    std::lock_guard lock(mu);
    preferred.push_back(node);
    return 0;
  }
  int node_of_page(const void*) override { return 1; }
  std::mutex mu;
  std::vector<std::vector<int>> pinned;
  std::vector<int> preferred;
  bool refuse_pinning = false;
};

// Pinned staging is registered with the CUDA driver where there is one (its test double under
// ctest), and unregistered when the executor goes: both want a context current, as a driver
// session makes one for its whole life. So each test borrows one before its executor is made
// (destroyed after it); without, the staging stayed registered and the next test's start,
// handed the same addresses, failed (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED).
std::vector<WorkerPlace> started_places(Executor& e, unsigned workers) {
  EXPECT_FALSE(e.start());
  // The threads pin themselves as they start: wait (bounded) until all did.
  for (int i = 0; i < 2000; ++i) {
    auto places = e.places();
    unsigned done = 0;
    for (const WorkerPlace& p : places) done += (!p.cpus.empty() || p.pin_error != 0) ? 1 : 0;
    if (done == workers) return places;
    usleep(1000);
  }
  return e.places();
}

TEST(ExecutorPlacement, PinsEachGroupAndPlacesItsStaging) {
  PlacementOs os;
  gpufile::sys::set_os(&os);
  {
    ExecutorConfig c;
    c.workers = 3;
    c.slabs_per_worker = 2;
    c.slab_bytes = 64 << 10;
    c.engine = gpufile::EnginePolicy::posix;
    c.groups = {WorkerGroup{0, {0, 1}, 0x1, 2}, WorkerGroup{1, {2, 3}, 0x2, 1}};
    gpufile::cuda::ScopedAnyContext context;
    Executor e(c);
    const auto places = started_places(e, 3);
    ASSERT_EQ(places.size(), 3u);
    EXPECT_EQ(places[0].node, 0);
    EXPECT_EQ(places[0].cpus, (std::vector<int>{0, 1}));
    EXPECT_EQ(places[2].node, 1);
    EXPECT_EQ(places[2].cpus, (std::vector<int>{2, 3}));
    for (const WorkerPlace& p : places) EXPECT_EQ(p.staging_node, 1);
    std::lock_guard lock(os.mu);
    // One block of staging per node (cuda::alloc_pinned_many): node 0's two workers share one.
    EXPECT_EQ(os.preferred, (std::vector<int>{0, 1}));
    EXPECT_EQ(os.pinned.size(), 3u);
  }
  gpufile::sys::set_os(nullptr);
}

TEST(ExecutorPlacement, UnplacedWorkersAreLeftAlone) {
  PlacementOs os;
  gpufile::sys::set_os(&os);
  {
    ExecutorConfig c;
    c.workers = 2;
    c.slab_bytes = 64 << 10;
    c.engine = gpufile::EnginePolicy::posix;
    gpufile::cuda::ScopedAnyContext context;
    Executor e(c);  // no groups: today's behaviour
    ASSERT_FALSE(e.start());
    for (const WorkerPlace& p : e.places()) {
      EXPECT_EQ(p.node, -1);
      EXPECT_EQ(p.staging_node, -1);
    }
    std::lock_guard lock(os.mu);
    EXPECT_TRUE(os.preferred.empty());
    EXPECT_TRUE(os.pinned.empty());
  }
  gpufile::sys::set_os(nullptr);
}

TEST(ExecutorPlacement, ARefusedPinningIsReportedNotFatal) {
  PlacementOs os;
  os.refuse_pinning = true;
  gpufile::sys::set_os(&os);
  {
    ExecutorConfig c;
    c.workers = 1;
    c.slab_bytes = 64 << 10;
    c.engine = gpufile::EnginePolicy::posix;
    c.groups = {WorkerGroup{0, {0}, 0x1, 1}};
    gpufile::cuda::ScopedAnyContext context;
    Executor e(c);
    const auto places = started_places(e, 1);
    ASSERT_EQ(places.size(), 1u);
    EXPECT_EQ(places[0].pin_error, -EPERM);
    EXPECT_TRUE(places[0].cpus.empty());
  }
  gpufile::sys::set_os(nullptr);
}

// A worker near some GPUs takes their IO first, and any other when none of theirs is listed.
TEST(ExecutorPlacement, NearWorkersClaimTheirGpusIoFirst) {
  ExecutorConfig c;
  c.workers = 0;  // no threads: the test claims as a worker would
  Executor e(c);
  auto device_job = [](int gpu) {
    auto j = std::make_unique<Job>();
    j->mem.kind = gpufile::cuda::MemKind::device;
    j->mem.device = gpu;
    j->len = 2 << 20;
    j->split(1 << 20);  // two pieces
    return j;
  };
  auto on0 = device_job(0), on1 = device_job(1), host = device_job(0);
  host->mem.kind = gpufile::cuda::MemKind::host_pageable;
  Job* jobs[] = {on0.get(), on1.get()};
  e.publish(jobs, 2, 0);
  Chunk got;
  ASSERT_TRUE(e.claim_listed(&got, 0x2));
  EXPECT_EQ(got.job, on1.get());  // younger, but on the worker's GPU
  ASSERT_TRUE(e.claim_listed(&got, 0x2));
  EXPECT_EQ(got.job, on1.get());
  ASSERT_TRUE(e.claim_listed(&got, 0x2));
  EXPECT_EQ(got.job, on0.get());  // nothing of GPU 1 left: it helps with GPU 0's
  e.publish(host.get(), 0);
  ASSERT_TRUE(e.claim_listed(&got, 0x2));
  EXPECT_EQ(got.job, host.get());  // host memory is near every worker
  ASSERT_TRUE(e.claim_listed(&got));  // unplaced: the oldest
  EXPECT_EQ(got.job, on0.get());
  ASSERT_TRUE(e.claim_listed(&got));
  EXPECT_EQ(got.job, host.get());
  EXPECT_FALSE(e.claim_listed(&got, 0x2));  // every piece taken, the list empty
}

}  // namespace
