// gpufile's log: one line per message,
//   gpufile <LEVEL> <ISO-8601 UTC time> <thread id>: message
// to the configured file (Settings::log_file, else <Settings::log_dir>/cufile.log), else stderr.
// Unlike cuFile, nothing is ever written to a file in the working directory by default.
// Thread-safe; usable from static constructors and destructors.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/settings.hpp"

namespace gpufile::log {

// Applies log_level, log_file and log_dir. Before the first call the level is WARN and the
// destination stderr. The file is opened (append, O_CLOEXEC) at the first line written to it,
// so a session that logs nothing creates no file.
void configure(const Settings& s);

void set_level(LogLevel level);
LogLevel level();

// True when a message of this level would be written. One relaxed atomic load.
bool enabled(LogLevel level);

void write(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The file a Settings value sends the log to; empty means stderr.
std::string destination(const Settings& s);

// TRACE, DEBUG, INFO, NOTICE, WARN (or WARNING), ERROR, OFF; any case.
std::optional<LogLevel> parse_level(std::string_view text);
const char* level_name(LogLevel level);

}  // namespace gpufile::log

// Formats and writes only when the level is enabled: the arguments are not evaluated otherwise.
#define GPUFILE_LOG(level, fmt, ...)                                             \
  do {                                                                           \
    const ::gpufile::LogLevel gpufile_log_level_ = (level);                      \
    if (::gpufile::log::enabled(gpufile_log_level_))                             \
      ::gpufile::log::write(gpufile_log_level_, fmt __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
