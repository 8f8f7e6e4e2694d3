// Whether other GPUs share the host's memory (src/exec/host_sharing.hpp), which decides whether
// long reads make page-cache windows: the launcher's word, this process's own GPUs, NVML's count
// of the host's other processes, the fallback where NVML cannot tell, and how long an answer is
// kept.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "exec/host_sharing.hpp"

using gpufile::exec::HostSharing;
using namespace std::chrono_literals;

namespace {

// NVML as the tests set it: `others` answered, each call counted.
struct FakeNvml {
  std::optional<unsigned> others;
  int calls = 0;
  HostSharing::CountOthers ask() {
    return [this] {
      ++calls;
      return others;
    };
  }
};

TEST(HostSharing, TheLaunchersWordNeedsNoNvml) {
  FakeNvml nvml{0u};
  HostSharing h(/*gpu=*/true, /*local_world=*/4, /*devices=*/1, nvml.ask(), 1s, /*background=*/false);
  EXPECT_TRUE(h.shared(0));
  EXPECT_EQ(nvml.calls, 0);
  EXPECT_NE(h.why().find("one of 4 processes"), std::string::npos) << h.why();
}

TEST(HostSharing, NvmlsOtherProcessesDecideForAProcessNobodyAnnounced) {
  FakeNvml nvml{2u};
  HostSharing busy(true, 1, 1, nvml.ask(), 1s, false);
  EXPECT_TRUE(busy.shared(0)) << "two other processes on the host's GPUs";
  FakeNvml alone{0u};
  HostSharing lone(true, 1, /*devices=*/4, alone.ask(), 1s, false);
  EXPECT_FALSE(lone.shared(2)) << "a process alone on a four-GPU host: staged bytes keep up";
  EXPECT_NE(lone.why().find("no other process"), std::string::npos) << lone.why();
}

TEST(HostSharing, AProcessReadingIntoTwoGpusSharesTheHostWithItself) {
  FakeNvml nvml{0u};
  HostSharing h(true, 1, 4, nvml.ask(), 1s, false);
  EXPECT_FALSE(h.shared(0));
  EXPECT_FALSE(h.shared(0));
  EXPECT_TRUE(h.shared(3)) << "reads into GPUs 0 and 3";
  EXPECT_TRUE(h.shared(-1));
  EXPECT_NE(h.why().find("reads into 2 GPUs"), std::string::npos) << h.why();
}

TEST(HostSharing, WhereNvmlCannotTellSeveralGpusSeenCountAsShared) {
  FakeNvml unknown{std::nullopt};
  EXPECT_TRUE(HostSharing(true, 1, 2, unknown.ask(), 1s, false).shared(0));
  EXPECT_FALSE(HostSharing(true, 1, 1, unknown.ask(), 1s, false).shared(0));
  EXPECT_TRUE(HostSharing(true, 1, 2, nullptr, 1s, false).shared(-1)) << "no NVML at all: as unknown";
  EXPECT_FALSE(HostSharing(/*gpu=*/false, 8, 2, unknown.ask(), 1s, false).shared(0)) << "no GPU";
}

TEST(HostSharing, StagingProcessesCountsOnlyWhatIsKnownAndNeverAsks) {
  FakeNvml nvml{3u};
  EXPECT_EQ(HostSharing(true, 4, 1, nvml.ask(), 1s, false).staging_processes(), 4u) << "the launcher's count";
  HostSharing h(true, 1, 4, nvml.ask(), 1s, false);
  EXPECT_EQ(h.staging_processes(), 0u) << "NVML not asked yet: as alone, unlike shared()";
  EXPECT_EQ(nvml.calls, 0);
  h.ask();
  EXPECT_EQ(h.staging_processes(), 4u) << "three others and this one";
  FakeNvml none{0u};
  HostSharing own(true, 1, 4, none.ask(), 1s, false);
  own.ask();
  EXPECT_EQ(own.staging_processes(), 0u);
  own.shared(0);
  own.shared(1);
  EXPECT_EQ(own.staging_processes(), 1u) << "one process reading into two GPUs";
  EXPECT_EQ(HostSharing(false, 4, 1, nvml.ask(), 1s, false).staging_processes(), 0u) << "no GPU";
}

TEST(HostSharing, AnAnswerIsKeptForItsTimeThenAskedAgain) {
  FakeNvml nvml{0u};
  HostSharing h(true, 1, 1, nvml.ask(), 500ms, false);
  EXPECT_FALSE(h.shared(0));
  nvml.others = 1;  // a peer opened its GPU
  EXPECT_FALSE(h.shared(0)) << "asked again within the time an answer is kept";
  EXPECT_EQ(nvml.calls, 1);
  std::this_thread::sleep_for(550ms);
  EXPECT_TRUE(h.shared(0)) << "a peer that came later is found";
  EXPECT_EQ(nvml.calls, 2);
}

// The library asks NVML on a thread of its own: a read never waits for it (loading NVML took
// 45-80 ms on a GPU host), and until the answer the rule without NVML holds.
TEST(HostSharing, NvmlIsAskedOnAThreadOfItsOwnAndNoReadWaits) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  HostSharing h(true, 1, /*devices=*/4, [&]() -> std::optional<unsigned> {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
    return 0u;
  });
  h.ask();
  EXPECT_TRUE(h.shared(0)) << "NVML not answered yet: four GPUs seen count as shared";
  const auto t0 = std::chrono::steady_clock::now();
  h.settle(50ms);  // what fork()'s preparation does: a bounded wait for the question out
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms) << "settle returned with the question out";
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  h.settle(10s);
  EXPECT_FALSE(h.shared(0)) << "settled: NVML's answer is in";
  EXPECT_NE(h.why().find("no other process"), std::string::npos) << h.why();
  EXPECT_FALSE(h.shared(0));
}

// A question that never comes back (NVML stuck in a forked child) does not hang the close: the
// destructor waits two seconds, then leaves the thread, which touches nothing of the object, to
// finish on its own.
TEST(HostSharing, AQuestionThatNeverComesBackDoesNotHangTheClose) {
  auto gate = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  auto open = std::make_shared<bool>(false);
  const auto t0 = std::chrono::steady_clock::now();
  {
    HostSharing h(true, 1, 1, [gate, open]() -> std::optional<unsigned> {
      std::unique_lock lock(gate->first);
      gate->second.wait(lock, [&] { return *open; });
      return 1u;
    });
    h.ask();
    EXPECT_FALSE(h.shared(0)) << "one GPU seen, no answer yet";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "the close waited for NVML";
  {
    std::lock_guard lock(gate->first);
    *open = true;
  }
  gate->second.notify_all();  // the left thread ends, on state it owns a share of
}

}  // namespace
