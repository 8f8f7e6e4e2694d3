// The routing policy (src/route/route.hpp), table by table: which path a request takes and why.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "route/route.hpp"

namespace gpufile::route {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// ---- piece sizes -----------------------------------------------------------------------------------

struct StepRow {
  uint64_t len;
  unsigned pieces;
  uint64_t min_chunk;
  uint64_t want;
  const char* why;
};

TEST(PieceStep, EqualSharesOnTheGridBetweenTheMinimumAndASlab) {
  const StepRow rows[] = {
      {100, 16, 256 * KiB, 256 * KiB, "a small request is cut no finer than the minimum"},
      {1 * MiB, 16, 256 * KiB, 256 * KiB, "four threads share a 1 MiB call"},
      {16 * MiB, 16, 256 * KiB, 1 * MiB, "mid-sized requests are spread over every thread"},
      {16 * MiB + 1, 16, 256 * KiB, 1 * MiB + 4 * KiB, "rounded up to the 4 KiB grid"},
      {64 * MiB, 16, 256 * KiB, 4 * MiB, "large requests are cut into slabs"},
      {8ull << 30, 16, 256 * KiB, 4 * MiB, "however large"},
      {1 * MiB, 16, 16 * MiB, 4 * MiB, "a minimum above the slab is capped at the slab"},
      {16 * MiB, 1, 256 * KiB, 4 * MiB, "one thread alone: slab-sized pieces"},
      {4 * MiB, 2, 256 * KiB, 2 * MiB, "two threads: halves"},
  };
  for (const StepRow& r : rows)
    EXPECT_EQ(piece_step(r.len, r.pieces, r.min_chunk, 4 * MiB), r.want) << r.why;
}

TEST(PieceStep, StepsStayOnTheFourKiBGridAndCoverTheRequest) {
  for (uint64_t len : {1ull, 4095ull, 12345ull, 1000000ull, 3333333ull}) {
    uint64_t step = piece_step(len, 7, 4 * KiB, 4 * MiB);
    EXPECT_EQ(step % (4 * KiB), 0u) << len;
    EXPECT_GE(step * 7, len) << len;  // seven pieces cover it
  }
}

TEST(PieceCount, CountsPiecesOnTheGridFromTheAlignedStart) {
  EXPECT_EQ(piece_count(0, 4 * MiB, 1 * MiB), 4u);
  EXPECT_EQ(piece_count(100, 4 * MiB, 1 * MiB), 5u);  // starts inside a block: one more
  EXPECT_EQ(piece_count(0, 1, 1 * MiB), 1u);
  EXPECT_EQ(piece_count(0, 0, 1 * MiB), 1u);
}

// ---- threads ---------------------------------------------------------------------------------------

// The lent GPU machine: 16 cores, 12 workers, 4 MiB slabs, 256 KiB minimum, 64 KiB small IO.
LoadFacts sixteen_cores(uint64_t len, unsigned callers, unsigned idle = 12) {
  LoadFacts f;
  f.len = len;
  f.callers = callers;
  f.workers = 12;
  f.idle_workers = idle;
  f.cores = 16;
  f.small_io_bytes = 64 * KiB;
  return f;
}

struct ThreadRow {
  const char* what;
  LoadFacts facts;
  Runner runner;
  uint32_t pieces;
  unsigned helpers;
  Reason why;
};

LoadFacts async(LoadFacts f) {
  f.synchronous = false;
  return f;
}
LoadFacts small_io_off(LoadFacts f) {
  f.small_io_bytes = 0;
  return f;
}
LoadFacts host(LoadFacts f) {
  f.staged = false;
  return f;
}
LoadFacts from_page_cache(LoadFacts f) {
  f.from_page_cache = true;
  return f;
}
LoadFacts at(LoadFacts f, uint64_t grid_offset) {
  f.grid_offset = grid_offset;
  return f;
}

TEST(PlanThreads, WhoRunsWhat) {
  const ThreadRow rows[] = {
      {"a 4 KiB read: small IO, on the caller", sixteen_cores(4 * KiB, 1), Runner::caller, 1, 0,
       Reason::small_io},
      {"small IO stays on the caller however busy", sixteen_cores(64 * KiB, 64, 0), Runner::caller,
       1, 0, Reason::small_io},
      {"200 KiB is one piece: the caller alone", sixteen_cores(200 * KiB, 1), Runner::caller, 1,
       0, Reason::one_piece},
      {"200 KiB across a piece boundary: two pieces, one worker helps",
       at(sixteen_cores(200 * KiB, 1), 100 * KiB), Runner::caller_and_workers, 2, 1,
       Reason::shared},
      {"1 MiB alone: the caller and three workers", sixteen_cores(1 * MiB, 1),
       Runner::caller_and_workers, 4, 3, Reason::shared},
      {"64 MiB alone: slab pieces, every idle worker helps", sixteen_cores(64 * MiB, 1),
       Runner::caller_and_workers, 16, 12, Reason::shared},
      {"4 MiB x 4 callers: three helpers each", sixteen_cores(4 * MiB, 4),
       Runner::caller_and_workers, 4, 3, Reason::shared},
      {"4 MiB x 5 callers: two helpers each", sixteen_cores(4 * MiB, 5),
       Runner::caller_and_workers, 3, 2, Reason::shared},
      {"4 MiB x 6 callers: enough to keep the workers busy with whole pieces",
       sixteen_cores(4 * MiB, 6), Runner::workers, 1, 1, Reason::callers_busy},
      {"4 MiB x 16 callers: whole pieces to the workers", sixteen_cores(4 * MiB, 16),
       Runner::workers, 1, 1, Reason::callers_busy},
      {"16 MiB x 16 callers: four slab pieces to the workers", sixteen_cores(16 * MiB, 16),
       Runner::workers, 4, 4, Reason::callers_busy},
      {"host memory x 16 callers: each reads into its own buffer",
       host(sixteen_cores(4 * MiB, 16)), Runner::caller, 1, 0, Reason::one_piece},
      {"host memory 16 MiB x 16: the caller runs its four pieces", host(sixteen_cores(16 * MiB, 16)),
       Runner::caller, 4, 0, Reason::workers_busy},
      {"workers busy elsewhere: the caller runs its own", sixteen_cores(16 * MiB, 1, 0),
       Runner::caller, 4, 0, Reason::workers_busy},
      {"asynchronous IO goes to the workers", async(sixteen_cores(16 * MiB, 1)), Runner::workers,
       12, 12, Reason::asynchronous},
      {"asynchronous small IO too", async(sixteen_cores(4 * KiB, 1)), Runner::workers, 1, 1,
       Reason::asynchronous},
      {"small_io_kb = 0 keeps IO off the caller", small_io_off(sixteen_cores(4 * KiB, 16)),
       Runner::workers, 1, 1, Reason::caller_thread_off},
      {"copies out of the page cache: 1 MiB x 16 callers, each issues its own",
       from_page_cache(sixteen_cores(1 * MiB, 16)), Runner::caller, 1, 0, Reason::from_page_cache},
      {"copies out of the page cache: 64 MiB alone, slab pieces on the caller",
       from_page_cache(sixteen_cores(64 * MiB, 1)), Runner::caller, 16, 0, Reason::from_page_cache},
      {"small IO out of the page cache is small IO", from_page_cache(sixteen_cores(4 * KiB, 16)),
       Runner::caller, 1, 0, Reason::small_io},
      {"asynchronous IO goes to the workers, page cache or not",
       async(from_page_cache(sixteen_cores(1 * MiB, 1))), Runner::workers, 4, 4,
       Reason::asynchronous},
      {"host memory needs no copy: its own rules", host(from_page_cache(sixteen_cores(4 * MiB, 16))),
       Runner::caller, 1, 0, Reason::one_piece},
  };
  for (const ThreadRow& r : rows) {
    SCOPED_TRACE(r.what);
    ThreadPlan p = plan_threads(r.facts);
    EXPECT_EQ(p.runner, r.runner) << describe(p.runner);
    EXPECT_EQ(p.pieces, r.pieces);
    EXPECT_EQ(p.helpers, r.helpers);
    EXPECT_EQ(p.why, r.why) << describe(p.why);
    EXPECT_EQ(piece_count(r.facts.grid_offset, r.facts.len, p.step), p.pieces);
  }
}

// A long read of cached bytes whose windows are not made yet: the caller makes them from the far
// end while workers stage from the near end, even when no worker is idle now (they take the
// near end's pieces as they come free), since the caller registering alone is slower than
// staging. Asynchronous IO and callers enough to keep the workers busy are left as they were.
TEST(PlanThreads, ALongReadMakesItsWindowsWithWorkersAlongside) {
  auto to_make = [](LoadFacts f) {
    f.windows_to_make = true;
    return f;
  };
  struct Row {
    const char* what;
    LoadFacts facts;
    Runner runner;
    uint32_t pieces;
    unsigned helpers;
    Reason why;
    bool ahead;
  };
  const Row rows[] = {
      {"64 MiB alone", to_make(sixteen_cores(64 * MiB, 1)), Runner::caller_and_workers, 16, 12,
       Reason::making_windows, true},
      {"64 MiB, no worker idle now: one is counted on", to_make(sixteen_cores(64 * MiB, 1, 0)),
       Runner::caller_and_workers, 16, 1, Reason::making_windows, true},
      {"64 MiB x 16 callers: the workers run it all", to_make(sixteen_cores(64 * MiB, 16)),
       Runner::workers, 16, 12, Reason::callers_busy, false},
      {"asynchronous: the workers", async(to_make(sixteen_cores(64 * MiB, 1))), Runner::workers,
       16, 12, Reason::asynchronous, false},
      {"host memory has no windows to make", host(to_make(sixteen_cores(64 * MiB, 1))),
       Runner::caller_and_workers, 16, 12, Reason::shared, false},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    ThreadPlan p = plan_threads(r.facts);
    EXPECT_EQ(p.runner, r.runner) << describe(p.runner);
    EXPECT_EQ(p.pieces, r.pieces);
    EXPECT_EQ(p.helpers, r.helpers);
    EXPECT_EQ(p.why, r.why) << describe(p.why);
    EXPECT_EQ(p.make_windows_ahead, r.ahead);
  }
}

TEST(PlanThreads, NoPieceIsLargerThanASlabExceptSmallIoOnTheCaller) {
  for (uint64_t len : {65 * KiB, 1 * MiB, 5 * MiB + 3, 64 * MiB})
    for (unsigned callers : {1u, 3u, 16u, 40u})
      for (unsigned idle : {0u, 5u, 12u}) {
        ThreadPlan p = plan_threads(sixteen_cores(len, callers, idle));
        EXPECT_LE(p.step, 4 * MiB) << len << " " << callers << " " << idle;
        if (p.runner == Runner::caller_and_workers) {
          EXPECT_LE(p.helpers, idle) << "counted on more helpers than are idle";
        }
      }
}

TEST(PlanThreads, SmallIoThresholdAboveASlabIsCappedAtTheSlab) {
  LoadFacts f = sixteen_cores(8 * MiB, 1);
  f.small_io_bytes = 64 * MiB;
  ThreadPlan p = plan_threads(f);
  EXPECT_NE(p.why, Reason::small_io);
  EXPECT_LE(p.step, 4 * MiB);
}

// A read that fills the page cache first fills only pieces of a whole fill folio or more: on a
// host of many cores an even share of a 10 MiB read is 600 KiB, and such a read came in unfilled.
// Cut for filling, no piece but the last is shorter than the folio, whoever runs it; cut without,
// the same read, shared among idle workers, is cut finer (so the rows do test the rule).
TEST(PlanThreads, AReadThatFillsTheCacheIsCutNoFinerThanAFillFolio) {
  constexpr uint64_t folio = 2 * MiB;
  for (uint64_t len : {3 * MiB, 10 * MiB + 77, 17 * MiB, 64 * MiB})
    for (unsigned idle : {0u, 12u})
      for (bool synchronous : {true, false}) {
        LoadFacts f = sixteen_cores(len, 1, idle);
        f.cores = 32;
        f.workers = 16;
        f.synchronous = synchronous;
        f.fill_folio = folio;
        SCOPED_TRACE(::testing::Message() << len << " bytes, " << idle << " idle, "
                                          << (synchronous ? "synchronous" : "asynchronous"));
        const ThreadPlan p = plan_threads(f);
        EXPECT_GE(p.step, folio);
        EXPECT_LE(p.step, f.slab);
        EXPECT_EQ(piece_count(f.grid_offset, f.len, p.step), p.pieces);
        f.fill_folio = 0;
        const bool shared_out = idle > 0 || !synchronous;
        if (shared_out && len <= 17 * MiB) {
          EXPECT_LT(plan_threads(f).step, folio);
        }
      }
}

TEST(PlanThreads, TheWorkersFallbackSpreadsOverEveryWorker) {
  ThreadPlan p = plan_for_workers(sixteen_cores(48 * MiB, 16), Reason::no_staging);
  EXPECT_EQ(p.runner, Runner::workers);
  EXPECT_EQ(p.pieces, 12u);
  EXPECT_EQ(p.helpers, 12u);
  EXPECT_EQ(p.why, Reason::no_staging);
}

// ---- storage ---------------------------------------------------------------------------------------

StorageFacts ext4_read(uint64_t len) {
  StorageFacts f;
  f.len = len;
  f.direct_capable = true;
  return f;
}

struct StorageRow {
  const char* what;
  StorageFacts facts;
  bool wants_residency;
  bool direct;
  bool guessed;
  Reason why;
};

template <typename Facts, typename Fn>
Facts with(Facts f, Fn fn) {
  fn(f);
  return f;
}

TEST(ChooseStorage, DirectOrPageCache) {
  const sys::Residency cold{10, 100}, warm{90, 100}, half{50, 100};
  const StorageRow rows[] = {
      {"no O_DIRECT fd", with(ext4_read(MiB), [](auto& f) { f.direct_capable = false; }), false,
       false, false, Reason::no_direct},
      {"tmpfs", with(ext4_read(MiB), [](auto& f) { f.direct_capable = false; f.memory_backed = true; }),
       false, false, false, Reason::in_memory},
      {"policy never", with(ext4_read(MiB), [](auto& f) { f.policy = DirectIoPolicy::never; }),
       false, false, false, Reason::policy_never},
      {"policy always beats a cached range",
       with(ext4_read(MiB), [&](auto& f) { f.policy = DirectIoPolicy::always; f.residency = warm; }),
       false, true, false, Reason::policy_always},
      {"force_odirect_mode", with(ext4_read(MiB), [](auto& f) { f.force_odirect = true; }), false,
       true, false, Reason::force_odirect},
      {"writes go direct", with(ext4_read(MiB), [](auto& f) { f.kind = sys::IoKind::write; }),
       false, true, false, Reason::writes_direct},
      {"cold range", with(ext4_read(MiB), [&](auto& f) { f.residency = cold; }), true, true, false,
       Reason::not_cached},
      {"cached range", with(ext4_read(MiB), [&](auto& f) { f.residency = warm; }), true, false,
       false, Reason::cached},
      {"half cached stays in the cache", with(ext4_read(MiB), [&](auto& f) { f.residency = half; }),
       true, false, false, Reason::cached},
      {"no cachestat, plain fd", ext4_read(MiB), true, false, false, Reason::follows_open},
      {"no cachestat, O_DIRECT fd", with(ext4_read(MiB), [](auto& f) { f.opened_direct = true; }),
       true, true, false, Reason::follows_open},
      {"a small read of a file that looks cached guesses",
       with(ext4_read(4 * KiB), [](auto& f) { f.looks_cached = true; }), false, false, true,
       Reason::looks_cached},
      {"up to 1 MiB may guess", with(ext4_read(MiB), [](auto& f) { f.looks_cached = true; }),
       false, false, true, Reason::looks_cached},
      {"above 1 MiB asks",
       with(ext4_read(MiB + 1), [&](auto& f) { f.looks_cached = true; f.residency = cold; }),
       true, true, false, Reason::not_cached},
      {"no guess where RWF_NOWAIT was refused",
       with(ext4_read(4 * KiB), [&](auto& f) { f.looks_cached = true; f.nowait_refused = true; f.residency = warm; }),
       true, false, false, Reason::cached},
      {"writes never guess",
       with(ext4_read(4 * KiB), [](auto& f) { f.looks_cached = true; f.kind = sys::IoKind::write; }),
       false, true, false, Reason::writes_direct},
      {"writes go through the page cache while pages are registered",
       with(ext4_read(MiB), [](auto& f) { f.kind = sys::IoKind::write; f.windows_live = true; }),
       false, false, false, Reason::pages_registered},
      {"even with GPUFILE_DIRECT_IO=always",
       with(ext4_read(MiB), [](auto& f) {
         f.kind = sys::IoKind::write; f.windows_live = true; f.policy = DirectIoPolicy::always;
       }),
       false, false, false, Reason::pages_registered},
      {"reads ignore registered pages", with(ext4_read(MiB), [&](auto& f) { f.windows_live = true; f.residency = cold; }),
       true, true, false, Reason::not_cached},
      // gpufile.cache_policy kept the file (choose_cache): only a read that misses changes.
      {"a cold range of a kept file reads through the page cache",
       with(ext4_read(MiB), [&](auto& f) { f.keep_cache = true; f.residency = cold; }), true,
       false, false, Reason::not_cached_kept},
      {"a cached range of a kept file", with(ext4_read(MiB), [&](auto& f) { f.keep_cache = true; f.residency = warm; }),
       true, false, false, Reason::cached},
      {"GPUFILE_DIRECT_IO=always beats keeping",
       with(ext4_read(MiB), [&](auto& f) { f.keep_cache = true; f.policy = DirectIoPolicy::always; f.residency = cold; }),
       false, true, false, Reason::policy_always},
      {"a kept file's writes still go direct",
       with(ext4_read(MiB), [](auto& f) { f.keep_cache = true; f.kind = sys::IoKind::write; }),
       false, true, false, Reason::writes_direct},
      {"a kept file without cachestat follows the open",
       with(ext4_read(MiB), [](auto& f) { f.keep_cache = true; f.opened_direct = true; }), true,
       true, false, Reason::follows_open},
  };
  for (const StorageRow& r : rows) {
    SCOPED_TRACE(r.what);
    EXPECT_EQ(wants_residency(r.facts), r.wants_residency);
    StorageChoice c = choose_storage(r.facts);
    EXPECT_EQ(c.direct, r.direct);
    EXPECT_EQ(c.guessed, r.guessed);
    EXPECT_EQ(c.why, r.why) << describe(c.why);
  }
}

struct CacheRow {
  const char* what;
  StorageFacts facts;
  bool staged;
  bool copies;
};

// Which reads copy straight out of page-cache windows: GPU memory, the page cache chosen, the
// bytes known to be there, and the file with windows.
TEST(CopiesFromCache, CachedReadsIntoTheGpuOfFilesWithWindows) {
  const sys::Residency cold{10, 100}, warm{100, 100};
  auto windowed = [](StorageFacts f) { f.cache_windows = true; return f; };
  const CacheRow rows[] = {
      {"a cached range", with(windowed(ext4_read(MiB)), [&](auto& f) { f.residency = warm; }), true, true},
      {"a guessed one", with(windowed(ext4_read(256 * KiB)), [](auto& f) { f.looks_cached = true; }),
       true, true},
      {"small IO stays off the windows", with(windowed(ext4_read(4 * KiB)), [](auto& f) {
         f.looks_cached = true; f.small_io_bytes = 64 * KiB; }), true, false},
      {"just above small IO", with(windowed(ext4_read(64 * KiB + 4096)), [](auto& f) {
         f.looks_cached = true; f.small_io_bytes = 64 * KiB; }), true, true},
      {"tmpfs", with(windowed(ext4_read(MiB)), [](auto& f) { f.direct_capable = false; f.memory_backed = true; }),
       true, true},
      {"a cold range goes O_DIRECT", with(windowed(ext4_read(MiB)), [&](auto& f) { f.residency = cold; }),
       true, false},
      {"a cold range of a kept file is read, not copied: its pages are not there yet",
       with(windowed(ext4_read(MiB)), [&](auto& f) { f.keep_cache = true; f.residency = cold; }),
       true, false},
      {"no file system O_DIRECT and residency unknown: not known cached",
       with(windowed(ext4_read(MiB)), [](auto& f) { f.direct_capable = false; }), true, false},
      {"GPUFILE_DIRECT_IO=never does not say cached", with(windowed(ext4_read(MiB)),
       [](auto& f) { f.policy = DirectIoPolicy::never; }), true, false},
      {"host memory is read in place", with(windowed(ext4_read(MiB)), [&](auto& f) { f.residency = warm; }),
       false, false},
      {"a file without windows", with(ext4_read(MiB), [&](auto& f) { f.residency = warm; }), true, false},
      {"writes", with(windowed(ext4_read(MiB)), [&](auto& f) { f.kind = sys::IoKind::write; f.residency = warm; }),
       true, false},
  };
  for (const CacheRow& r : rows) {
    SCOPED_TRACE(r.what);
    EXPECT_EQ(copies_from_cache(r.facts, choose_storage(r.facts), r.staged), r.copies);
  }
}

// ---- the page cache on a miss (gpufile.cache_policy) -------------------------------------------

constexpr uint64_t GiB = 1024 * MiB;

// A 4 GiB checkpoint on ext4, weighed by gpufile.cache_policy=auto against `room`.
CacheFacts checkpoint(std::optional<uint64_t> room) {
  CacheFacts f;
  f.file_size = 4 * GiB;
  f.room = room;
  return f;
}

struct MissRow {
  const char* what;
  CacheFacts facts;
  bool keep;
  Reason why;
};

TEST(ChooseCache, KeepWhatFitsBypassWhatDoesNot) {
  const MissRow rows[] = {
      {"fits: a quarter of the room", checkpoint(16 * GiB), true, Reason::cache_fits},
      {"fits: exactly half of the room", checkpoint(8 * GiB), true, Reason::cache_fits},
      {"does not fit: a byte over half", checkpoint(8 * GiB - 2), false, Reason::cache_too_big},
      {"does not fit: larger than the room", checkpoint(2 * GiB), false, Reason::cache_too_big},
      {"no room at all (a cgroup at its limit)", checkpoint(0), false, Reason::cache_too_big},
      {"an empty file fits anywhere", with(checkpoint(0), [](auto& f) { f.file_size = 0; }), true,
       Reason::cache_fits},
      {"room unknown: bypass, as before", checkpoint(std::nullopt), false,
       Reason::cache_room_unknown},
      {"tmpfs: the file is the cache, whatever the room",
       with(checkpoint(GiB), [](auto& f) { f.memory_backed = true; }), true, Reason::cache_in_memory},
      {"tmpfs under bypass too",
       with(checkpoint(GiB), [](auto& f) { f.memory_backed = true; f.policy = CachePolicy::bypass; }),
       true, Reason::cache_in_memory},
      {"a block device is not weighed",
       with(checkpoint(64 * GiB), [](auto& f) { f.block_device = true; }), false,
       Reason::cache_block_device},
      {"GPUDirect Storage reads the file past the cache",
       with(checkpoint(64 * GiB), [](auto& f) { f.vendor_direct = true; }), false,
       Reason::cache_vendor_direct},
      {"keep: whatever the size",
       with(checkpoint(GiB), [](auto& f) { f.policy = CachePolicy::keep; }), true, Reason::cache_keep},
      {"keep: with GPUDirect Storage too",
       with(checkpoint(GiB), [](auto& f) { f.policy = CachePolicy::keep; f.vendor_direct = true; }),
       true, Reason::cache_keep},
      {"bypass: even what fits",
       with(checkpoint(64 * GiB), [](auto& f) { f.policy = CachePolicy::bypass; }), false,
       Reason::cache_bypass},
  };
  for (const MissRow& r : rows) {
    SCOPED_TRACE(r.what);
    const CacheChoice c = choose_cache(r.facts);
    EXPECT_EQ(c.keep, r.keep);
    EXPECT_EQ(c.why, r.why) << describe(c.why);
  }
}

// ---- vendor direct (NVIDIA's libcufile) ---------------------------------------------------------

// A read NVIDIA's library takes: loaded with GDS, the file accepted, 4 MiB aligned into GPU
// memory, and gpufile's own choice O_DIRECT.
VendorFacts nvidia_read() {
  VendorFacts f;
  f.loaded = true;
  f.driver_gds = true;
  f.file_accepted = true;
  f.device_memory = true;
  f.len = 4 * MiB;
  f.file_offset = 8 * MiB;
  f.address = 1ull << 32;
  f.small_io_bytes = 64 * KiB;
  f.storage = StorageChoice{true, false, Reason::not_cached};
  return f;
}

struct VendorRow {
  const char* what;
  VendorFacts facts;
  bool use;
  Reason why;
};

TEST(ChooseVendor, NvidiaTakesLargeAlignedGpuIoOnAcceptedFilesOnly) {
  const VendorRow rows[] = {
      {"large aligned GPU IO on an accepted file", nvidia_read(), true, Reason::vendor_direct},
      {"a write too", with(nvidia_read(), [](auto& f) { f.storage.why = Reason::writes_direct; }), true,
       Reason::vendor_direct},
      {"off", with(nvidia_read(), [](auto& f) { f.policy = VendorPolicy::off; }), false, Reason::vendor_off},
      {"off wins over everything", with(nvidia_read(), [](auto& f) { f.policy = VendorPolicy::off; f.loaded = false; }),
       false, Reason::vendor_off},
      {"not loaded", with(nvidia_read(), [](auto& f) { f.loaded = false; }), false, Reason::vendor_not_loaded},
      {"compat mode only, auto", with(nvidia_read(), [](auto& f) { f.driver_gds = false; }), false,
       Reason::vendor_compat_only},
      {"compat mode only, forced on", with(nvidia_read(), [](auto& f) { f.driver_gds = false; f.policy = VendorPolicy::on; }),
       true, Reason::vendor_direct},
      {"file refused", with(nvidia_read(), [](auto& f) { f.file_accepted = false; }), false,
       Reason::vendor_file_refused},
      {"asynchronous", with(nvidia_read(), [](auto& f) { f.synchronous = false; }), false,
       Reason::vendor_asynchronous},
      {"host memory", with(nvidia_read(), [](auto& f) { f.device_memory = false; }), false,
       Reason::vendor_host_memory},
      {"at the small-IO threshold", with(nvidia_read(), [](auto& f) { f.len = 64 * KiB; }), false,
       Reason::vendor_small},
      {"just above it", with(nvidia_read(), [](auto& f) { f.len = 68 * KiB; }), true, Reason::vendor_direct},
      {"small_io_kb 0: every aligned size", with(nvidia_read(), [](auto& f) { f.len = 4 * KiB; f.small_io_bytes = 0; }),
       true, Reason::vendor_direct},
      {"size off the grid", with(nvidia_read(), [](auto& f) { f.len = 4 * MiB + 512; }), false,
       Reason::vendor_unaligned},
      {"file offset off the grid", with(nvidia_read(), [](auto& f) { f.file_offset = 512; }), false,
       Reason::vendor_unaligned},
      {"GPU address off the grid", with(nvidia_read(), [](auto& f) { f.address += 256; }), false,
       Reason::vendor_unaligned},
      {"a cached range stays in the page cache",
       with(nvidia_read(), [](auto& f) { f.storage = StorageChoice{false, false, Reason::cached}; }), false,
       Reason::vendor_page_cache},
      {"a write into registered page-cache windows",
       with(nvidia_read(), [](auto& f) { f.storage = StorageChoice{false, false, Reason::pages_registered}; }),
       false, Reason::vendor_page_cache},
  };
  for (const VendorRow& r : rows) {
    SCOPED_TRACE(r.what);
    const VendorChoice c = choose_vendor(r.facts);
    EXPECT_EQ(c.use, r.use);
    EXPECT_EQ(c.why, r.why) << describe(c.why);
  }
}

TEST(Describe, EveryReasonHasASentence) {
  for (int i = 0; i < static_cast<int>(Reason::count); ++i)
    EXPECT_NE(std::string(describe(static_cast<Reason>(i))), "?") << i;
}

}  // namespace
}  // namespace gpufile::route
