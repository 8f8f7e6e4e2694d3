// The one place where the runtime's Error becomes the public API's Exception.
#pragma once

#include <string_view>
#include <system_error>

#include "core/error.hpp"
#include "gpufile/error.hpp"

namespace gpufile::cppapi {

// The runtime's code for a public one and back (every code but errc::driver_open has one).
errc public_code(Errc c);
Errc internal_code(errc c);

// An OS error as std::generic_category (its errno), anything else as a gpufile::errc.
std::error_code code_of(const Error& e);

// Throws Exception; its what() reads "<what>[ <path>]: <reason>".
[[noreturn]] void raise(const Error& e, std::string_view what, std::string_view path = {});
[[noreturn]] void raise(errc code, std::string_view message);
// Throws Exception with the code of `e` and `message` as its what(), whole.
[[noreturn]] void raise_text(const Error& e, std::string_view message);

}  // namespace gpufile::cppapi
