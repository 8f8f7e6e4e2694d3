// What the configuration and statistics code needs to know about the driver session, without
// depending on the rest of the runtime. Implemented in src/exec/runtime.cpp.
#pragma once

#include <functional>

#include "core/settings.hpp"

namespace gpufile {

// True between a successful driver open (explicit or implicit) and the last close.
bool driver_is_open();

// Runs fn on the settings of the open driver session, under the session lock, and returns
// true; returns false (fn not called) when the driver is not open.
bool with_open_settings(const std::function<void(Settings&)>& fn);

}  // namespace gpufile
