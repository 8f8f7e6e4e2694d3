#include "errors.hpp"

#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "core/redact.hpp"

namespace gpufile::py {

namespace {

PyObject* gpufile_error = nullptr;

// Messages and file names of every exception raised here pass core/redact.hpp: a URL in them
// shows no signature, token or password (an exception is logged by whoever catches it).
[[noreturn]] void raise_os_error(int err, const std::string& what, const char* filename) {
  // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError, ...) by errno.
  const std::string message = redact_text(std::string(std::strerror(err)) + " (" + what + ")");
  nb::object args = filename ? nb::make_tuple(err, message, redact_url(filename)) : nb::make_tuple(err, message);
  PyErr_SetObject(PyExc_OSError, args.ptr());
  throw nb::python_error();
}

bool is_argument_error(Errc c) {
  switch (c) {
    case Errc::invalid_argument:
    case Errc::pointer_range:
    case Errc::mapping_range:
    case Errc::pointer_invalid:
    case Errc::memory_type_invalid:
    case Errc::invalid_open_flag:
      return true;
    default:
      return false;
  }
}

}  // namespace

void register_errors(nb::module_ m) {
  gpufile_error = PyErr_NewExceptionWithDoc(
      "gpufile.Error", "A gpufile failure that is not an OS error or a bad argument.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = nb::borrow(gpufile_error);
}

void raise(const Error& e, const char* what, const char* filename) {
  if (e.code == Errc::system) raise_os_error(e.sys_errno, what, filename);
  std::string message = std::string(what) + ": " + describe(e);
  if (filename) message += ": " + std::string(filename);
  message = redact_text(message);
  if (is_argument_error(e.code)) throw nb::value_error(message.c_str());
  PyErr_SetString(gpufile_error, message.c_str());
  throw nb::python_error();
}

void raise_os(int err, const std::string& message, const std::string& filename) {
  nb::object args = nb::make_tuple(err, redact_text(message), redact_url(filename));
  PyErr_SetObject(PyExc_OSError, args.ptr());
  throw nb::python_error();
}

void raise_message(const std::string& message) {
  PyErr_SetString(gpufile_error, redact_text(message).c_str());
  throw nb::python_error();
}

void raise_timeout(double seconds) {
  std::string message = "the IO did not finish within " + std::to_string(seconds) + " s";
  PyErr_SetString(PyExc_TimeoutError, message.c_str());
  throw nb::python_error();
}

[[noreturn]] void raise_unsupported(const char* message) {
  nb::object unsupported = nb::module_::import_("io").attr("UnsupportedOperation");
  PyErr_SetString(unsupported.ptr(), message);
  throw nb::python_error();
}

}  // namespace gpufile::py
