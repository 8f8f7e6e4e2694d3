#include "core/log.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "core/redact.hpp"

namespace gpufile::log {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};

// The destination. Allocated once and never freed, so that logging from static destructors
// (driver close at exit) cannot touch a destroyed object.
struct Sink {
  std::mutex mu;
  std::string path;  // empty: stderr
  int fd = -1;       // open file descriptor for `path`, -1 until the first line
  bool open_failed = false;
};

Sink& sink() {
  static Sink* s = new Sink;
  return *s;
}

constexpr const char* kLevelNames[] = {"TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "ERROR", "OFF"};

long thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

// "2026-11-22T03:05:01.123456Z"
void format_time(char* out, size_t len) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &utc);
  const unsigned micros = static_cast<unsigned>(ts.tv_nsec / 1000) % 1000000u;
  snprintf(out, len, "%.19s.%06uZ", date, micros);
}

void write_all(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to report a failing log
    data += n;
    len -= static_cast<size_t>(n);
  }
}

// Called with s.mu held. Falls back to stderr, once noisily, when the file cannot be opened.
int destination_fd(Sink& s) {
  if (s.path.empty() || s.open_failed) return STDERR_FILENO;
  if (s.fd >= 0) return s.fd;
  s.fd = ::open(s.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (s.fd >= 0) return s.fd;
  s.open_failed = true;
  std::string note = "gpufile ERROR cannot open log file " + s.path + ": " + std::strerror(errno) +
                     "; logging to stderr\n";
  write_all(STDERR_FILENO, note.data(), note.size());
  return STDERR_FILENO;
}

// One message must stay one line.
void flatten_newlines(std::string& text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
}

std::string format_message(const char* fmt, va_list args) {
  char small[512];
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(small, sizeof small, fmt, copy);
  va_end(copy);
  if (n < 0) return fmt;
  if (static_cast<size_t>(n) < sizeof small) return std::string(small, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  vsnprintf(big.data(), big.size(), fmt, args);
  big.resize(static_cast<size_t>(n));
  return big;
}

}  // namespace

std::string destination(const Settings& s) {
  if (!s.log_file.empty()) return s.log_file;
  if (!s.log_dir.empty()) return s.log_dir + "/cufile.log";
  return {};
}

void configure(const Settings& s) {
  std::string path = destination(s);
  {
    Sink& k = sink();
    std::lock_guard lock(k.mu);
    if (path != k.path) {
      if (k.fd >= 0) ::close(k.fd);
      k.fd = -1;
      k.path = std::move(path);
    }
    k.open_failed = false;  // a new configuration gets a new attempt
  }
  set_level(s.log_level);
}

void set_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool enabled(LogLevel level) {
  int l = static_cast<int>(level);
  return l >= g_level.load(std::memory_order_relaxed) && l < static_cast<int>(LogLevel::off);
}

void write(LogLevel level, const char* fmt, ...) {
  if (!enabled(level)) return;
  va_list args;
  va_start(args, fmt);
  // A URL in a message shows no signature, token or password (core/redact.hpp), at any level.
  std::string message = redact_text(format_message(fmt, args));
  va_end(args);
  flatten_newlines(message);

  char when[48];
  format_time(when, sizeof when);
  std::string line;
  line.reserve(message.size() + 80);
  line.append("gpufile ").append(level_name(level)).append(" ").append(when).append(" ");
  line.append(std::to_string(thread_id())).append(": ").append(message).append("\n");

  Sink& k = sink();
  std::lock_guard lock(k.mu);
  write_all(destination_fd(k), line.data(), line.size());
}

std::optional<LogLevel> parse_level(std::string_view text) {
  std::string upper;
  for (char c : text) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (upper == "WARNING") return LogLevel::warn;
  for (int i = 0; i <= static_cast<int>(LogLevel::off); ++i)
    if (upper == kLevelNames[i]) return static_cast<LogLevel>(i);
  return std::nullopt;
}

const char* level_name(LogLevel level) {
  int i = static_cast<int>(level);
  if (i < 0 || i > static_cast<int>(LogLevel::off)) return "?";
  return kLevelNames[i];
}

}  // namespace gpufile::log
