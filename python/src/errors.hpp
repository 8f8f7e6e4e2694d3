// gpufile's errors as Python exceptions: OSError (with errno, so FileNotFoundError and friends)
// for system errors, ValueError for bad arguments, gpufile.Error for the rest.
#pragma once

#include <nanobind/nanobind.h>

#include "core/error.hpp"

namespace gpufile::py {

namespace nb = nanobind;

// Creates gpufile.Error (a RuntimeError) in `m`.
void register_errors(nb::module_ m);

// Each raises a Python exception (throws nb::python_error).
[[noreturn]] void raise(const Error& e, const char* what, const char* filename = nullptr);
[[noreturn]] void raise_message(const std::string& message);
// OSError(err, message, filename): the subclass errno picks (FileNotFoundError, ...), with a
// message that already says what happened (remote objects' failures).
[[noreturn]] void raise_os(int err, const std::string& message, const std::string& filename);
[[noreturn]] void raise_timeout(double seconds);
// io.UnsupportedOperation, as Python's files raise for an IO their mode does not allow.
[[noreturn]] void raise_unsupported(const char* message);

}  // namespace gpufile::py
