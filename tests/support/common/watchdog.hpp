// A guard for tests that could hang: if the scope is still running after `limit`, the process
// prints what was running, the stacks of all its threads and of its child processes (through
// gdb, where it is installed), kills those children and exits, so a hung IO fails its test in
// seconds, with its own diagnosis, instead of holding CI until CTest's timeout. Used by the
// integration and fault suites.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace test_support {

// Prints the stacks of every thread of process `pid` to stderr: `gdb -p pid -batch` under
// `timeout` (gdb itself can get stuck on a process in a bad state). Started with posix_spawnp,
// which runs no pthread_atfork handlers, so it works from a process whose fork handlers would
// block (the library parks its workers there). Without gdb it says so and returns.
inline void dump_stacks(pid_t pid, const char* what) {
  std::fprintf(stderr, "\n==== stacks of %s (pid %d) ====\n", what, static_cast<int>(pid));
  std::fflush(stderr);
  const std::string p = std::to_string(pid);
  const char* argv[] = {"timeout", "-s", "KILL", "90", "gdb", "-p", p.c_str(), "-batch", "-nx",
                        "-ex", "set pagination off", "-ex", "info threads",
                        "-ex", "thread apply all bt", nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
  pid_t gdb = -1;
  const int err = posix_spawnp(&gdb, "timeout", &fa, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) {
    std::fprintf(stderr, "(cannot run timeout/gdb: no stacks)\n");
    return;
  }
  int status = 0;
  while (waitpid(gdb, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    std::fprintf(stderr, "(gdb did not finish cleanly: status 0x%x; is gdb installed?)\n", status);
  std::fprintf(stderr, "==== end of stacks of pid %d ====\n", static_cast<int>(pid));
  std::fflush(stderr);
}

// The processes whose parent is `parent`: a hung test may be waiting on one of them (a fork
// test's child).
inline std::vector<pid_t> child_processes(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat_path = std::string("/proc/") + e->d_name + "/stat";
    FILE* f = std::fopen(stat_path.c_str(), "re");
    if (f == nullptr) continue;
    char buf[512] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so parse after the
    // last ')'.
    std::string s(buf, n);
    const size_t close = s.rfind(')');
    int ppid = 0;
    char state = 0;
    if (close != std::string::npos &&
        std::sscanf(s.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent)
      out.push_back(pid);
  }
  closedir(proc);
  return out;
}

class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::string what) {
    thread_ = std::thread([this, limit, what = std::move(what)] {
      std::unique_lock lock(mu_);
      started_ = true;
      cv_.notify_all();
      if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
      std::fprintf(stderr, "\nWATCHDOG: \"%s\" still running after %lld ms: a hang.\n",
                   what.c_str(), static_cast<long long>(limit.count()));
      std::fflush(stderr);
      const std::vector<pid_t> children = child_processes(getpid());
      for (pid_t child : children) dump_stacks(child, "a child process");
      dump_stacks(getpid(), "this process");
      for (pid_t child : children) kill(child, SIGKILL);  // no orphan outlives the test
      std::fprintf(stderr, "WATCHDOG: exiting.\n");
      std::fflush(stderr);
      _exit(3);
    });
    // Returns once the thread runs the function above: by then it is through the sanitizers'
    // thread start-up, which allocates. A test that forks after making a watchdog thus never
    // forks while this thread holds an allocator lock (GCC 12's ASan does not reset those in
    // the child, which would hang at its next allocation of that size class).
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return started_; });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace test_support
