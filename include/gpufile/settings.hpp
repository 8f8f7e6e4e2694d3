// The driver session and its settings. Settings have cufile.json's dotted keys
// ("properties.max_direct_io_size_kb", "gpufile.workers", ...; docs/settings.md lists them all)
// and apply when the driver opens: the first File, RegisteredBuffer, IoBatch or driver_open()
// opens it. Precedence: these calls > environment > cufile.json > defaults.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "gpufile/export.hpp"

namespace gpufile {

// Opens the driver (counts one use; the first IO would open it anyway).
GPUFILE_API void driver_open();
// Counts one use off; the last closes the driver: waits for IO in flight, forgets every file and
// buffer registration (Files opened before stay open but their IO fails) and frees the staging
// memory. Closing a closed driver does nothing.
GPUFILE_API void driver_close();
GPUFILE_API bool is_driver_open();
// The IO engine the workers use: "io_uring" or "posix". Opens the driver if needed.
GPUFILE_API std::string io_engine();

// Every setting as one JSON object text, keyed by cufile.json key: the open driver's, else what
// the next open would use.
GPUFILE_API std::string settings_json();
// One of them, as JSON text ("8", "true", "\"auto\""); errc::invalid_argument for an unknown key.
GPUFILE_API std::string setting(std::string_view key);
// Sets one setting for the next driver open, its value as JSON text. errc::invalid_argument
// (what() says why) for an unknown key, a value of the wrong type or out of range;
// errc::driver_open while the driver is open (settings are fixed for an open driver).
GPUFILE_API void set_setting_json(std::string_view key, std::string_view value_json);
GPUFILE_API void set_setting(std::string_view key, std::string_view text);
GPUFILE_API void set_setting(std::string_view key, bool value);
inline void set_setting(std::string_view key, const char* text) {
  set_setting(key, std::string_view(text));
}
template <std::integral T>
  requires(!std::same_as<T, bool>)
void set_setting(std::string_view key, T value) {
  set_setting_json(key, std::to_string(value));
}

}  // namespace gpufile
