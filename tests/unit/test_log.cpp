// core/log: level filtering, line format, destinations, thread safety.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/log.hpp"

namespace gpufile::log {
namespace {

namespace fs = std::filesystem;

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpufile_log_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(dir_);
  }

  void TearDown() override {
    configure(Settings{});
    set_level(LogLevel::warn);  // the state before any configure()
    fs::remove_all(dir_);
  }

  // Sends the log to `path` at `level`.
  static void to_file(const fs::path& path, LogLevel level) {
    Settings s;
    s.log_file = path.string();
    s.log_level = level;
    configure(s);
  }

  static std::vector<std::string> lines_of(const fs::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  fs::path dir_;
  static inline int counter_ = 0;
};

const std::regex kLine(
    R"(gpufile (TRACE|DEBUG|INFO|NOTICE|WARN|ERROR) \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z \d+: (.*))");

TEST(LogLevels, ParseAndName) {
  EXPECT_EQ(parse_level("TRACE"), LogLevel::trace);
  EXPECT_EQ(parse_level("debug"), LogLevel::debug);
  EXPECT_EQ(parse_level("Info"), LogLevel::info);
  EXPECT_EQ(parse_level("notice"), LogLevel::notice);
  EXPECT_EQ(parse_level("WARN"), LogLevel::warn);
  EXPECT_EQ(parse_level("warning"), LogLevel::warn);
  EXPECT_EQ(parse_level("error"), LogLevel::error);
  EXPECT_EQ(parse_level("OFF"), LogLevel::off);
  EXPECT_FALSE(parse_level(""));
  EXPECT_FALSE(parse_level("verbose"));
  EXPECT_STREQ(level_name(LogLevel::notice), "NOTICE");
  EXPECT_STREQ(level_name(LogLevel::off), "OFF");
}

TEST_F(LogTest, DefaultLevelIsWarn) {
  // Holds for this test binary as long as no test leaves another level behind.
  EXPECT_EQ(level(), LogLevel::warn);
  EXPECT_TRUE(enabled(LogLevel::warn));
  EXPECT_TRUE(enabled(LogLevel::error));
  EXPECT_FALSE(enabled(LogLevel::notice));
}

TEST_F(LogTest, LevelFiltering) {
  set_level(LogLevel::info);
  EXPECT_FALSE(enabled(LogLevel::debug));
  EXPECT_TRUE(enabled(LogLevel::info));
  EXPECT_TRUE(enabled(LogLevel::error));
  EXPECT_FALSE(enabled(LogLevel::off));  // OFF is a threshold, never a message level
  set_level(LogLevel::off);
  EXPECT_FALSE(enabled(LogLevel::error));
  set_level(LogLevel::trace);
  EXPECT_TRUE(enabled(LogLevel::trace));
}

TEST_F(LogTest, MacroDoesNotEvaluateArgumentsWhenDisabled) {
  const fs::path path = dir_ / "a.log";
  to_file(path, LogLevel::error);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  GPUFILE_LOG(LogLevel::info, "value %d", count());
  EXPECT_EQ(evaluated, 0);
  GPUFILE_LOG(LogLevel::error, "value %d", count());
  EXPECT_EQ(evaluated, 1);
  GPUFILE_LOG(LogLevel::error, "no arguments");
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(": value 1"), std::string::npos);
}

TEST_F(LogTest, LineFormatAndFileDestination) {
  const fs::path path = dir_ / "gpufile.log";
  to_file(path, LogLevel::debug);
  write(LogLevel::debug, "hello %s %d", "world", 42);
  write(LogLevel::trace, "filtered");
  write(LogLevel::error, "two\nlines\n");
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, kLine)) << lines[0];
  EXPECT_EQ(m[1], "DEBUG");
  EXPECT_EQ(m[2], "hello world 42");
  ASSERT_TRUE(std::regex_match(lines[1], m, kLine)) << lines[1];
  EXPECT_EQ(m[2], "two lines");  // one message stays one line
}

TEST_F(LogTest, UrlsAreRedactedAtEveryLevel) {
  const fs::path path = dir_ / "secrets.log";
  to_file(path, LogLevel::trace);
  for (int l = static_cast<int>(LogLevel::trace); l < static_cast<int>(LogLevel::off); ++l)
    write(static_cast<LogLevel>(l), "open %s: %s", "https://u:pw-SECRET@h/k?X-Amz-Signature=sig-SECRET&n=1",
          "failed");
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(LogLevel::off));
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find("SECRET"), std::string::npos) << line;
    EXPECT_NE(line.find("open https://u:REDACTED@h/k?X-Amz-Signature=REDACTED&n=1: failed"), std::string::npos)
        << line;
  }
}

TEST_F(LogTest, LongMessagesAreNotCut) {
  const fs::path path = dir_ / "long.log";
  to_file(path, LogLevel::info);
  const std::string big(5000, 'x');
  write(LogLevel::info, "%s|", big.c_str());
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(big + "|"), std::string::npos);
}

TEST_F(LogTest, LogDirGetsCufileLog) {
  Settings s;
  s.log_dir = dir_.string();
  s.log_level = LogLevel::info;
  EXPECT_EQ(destination(s), (dir_ / "cufile.log").string());
  configure(s);
  write(LogLevel::info, "in the directory");
  EXPECT_EQ(lines_of(dir_ / "cufile.log").size(), 1u);
  // An explicit file wins over the directory.
  s.log_file = (dir_ / "explicit.log").string();
  EXPECT_EQ(destination(s), s.log_file);
}

TEST_F(LogTest, AppendsAndCreatesNoFileUntilTheFirstLine) {
  const fs::path path = dir_ / "append.log";
  to_file(path, LogLevel::info);
  write(LogLevel::debug, "below the level");
  EXPECT_FALSE(fs::exists(path));
  { std::ofstream(path) << "earlier line\n"; }
  write(LogLevel::info, "later line");
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "earlier line");
}

TEST_F(LogTest, FileIsOpenedCloseOnExec) {
  const fs::path path = dir_ / "cloexec.log";
  to_file(path, LogLevel::info);
  write(LogLevel::info, "open it");
  int found = 0;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(entry.path(), ec) != path) continue;
    int fd = std::stoi(entry.path().filename().string());
    int flags = fcntl(fd, F_GETFD);
    EXPECT_TRUE(flags & FD_CLOEXEC);
    int status = fcntl(fd, F_GETFL);
    EXPECT_TRUE(status & O_APPEND);
    ++found;
  }
  EXPECT_EQ(found, 1);
}

TEST_F(LogTest, DefaultsWriteToStderrAndNothingToTheWorkingDirectory) {
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  configure(Settings{});  // cuFile would create ./cufile.log here
  testing::internal::CaptureStderr();
  write(LogLevel::error, "to stderr");
  const std::string err = testing::internal::GetCapturedStderr();
  fs::current_path(cwd);
  EXPECT_NE(err.find("gpufile ERROR "), std::string::npos);
  EXPECT_NE(err.find(": to stderr\n"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(LogTest, UnopenableFileFallsBackToStderr) {
  to_file(dir_ / "no_such_dir" / "x.log", LogLevel::info);
  testing::internal::CaptureStderr();
  write(LogLevel::info, "still visible");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot open log file"), std::string::npos);
  EXPECT_NE(err.find("still visible"), std::string::npos);
}

TEST_F(LogTest, EightThreadsWriteWholeLines) {
  const fs::path path = dir_ / "threads.log";
  to_file(path, LogLevel::info);
  constexpr int kThreads = 8;
  constexpr int kLines = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) GPUFILE_LOG(LogLevel::info, "thread %d line %d end", t, i);
    });
  for (auto& th : threads) th.join();
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::vector<int> per_thread(kThreads, 0);
  const std::regex body(R"(thread (\d) line (\d+) end)");
  for (const std::string& line : lines) {
    std::smatch m, b;
    ASSERT_TRUE(std::regex_match(line, m, kLine)) << line;
    const std::string message = m[2];
    ASSERT_TRUE(std::regex_match(message, b, body)) << line;
    // Lines of one thread keep their order.
    EXPECT_EQ(std::stoi(b[2]), per_thread[std::stoi(b[1])]++);
  }
}

}  // namespace
}  // namespace gpufile::log
