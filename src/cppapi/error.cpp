#include <string>

#include "core/redact.hpp"
#include "cppapi/raise.hpp"

namespace gpufile {

namespace {

class Category : public std::error_category {
 public:
  const char* name() const noexcept override { return "gpufile"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::driver_open: return "the driver is open: settings apply at its next open";
      case errc::cuda: return "CUDA driver error";  // the CUresult is in Exception's what()
      default: break;
    }
    return describe(Error::of(cppapi::internal_code(static_cast<errc>(value))));
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

// Every message passes redact_text: an exception is logged by whoever catches it, and a URL in it
// may carry a signature or a password (core/redact.hpp).
Exception::Exception(std::error_code code, const std::string& what, int cuda_result)
    : std::system_error(code, redact_text(what)), cuda_result_(cuda_result) {}

// Out of line: the vtable and typeinfo live in libgpufile.so, once.
Exception::~Exception() = default;

namespace cppapi {

// The runtime's codes and the public ones, side by side (errc::driver_open has no runtime code).
// The switches below have no default, so -Wswitch names a code added to either enum alone.
#define GPUFILE_BOTH_CODES(X)                            \
  X(invalid_argument) X(cuda) X(driver_not_open) X(driver_closing) \
  X(handle_not_registered) X(handle_already_registered) X(invalid_file_type) \
  X(invalid_open_flag) X(io_not_supported) X(buffer_already_registered) \
  X(buffer_not_registered) X(pointer_range) X(mapping_range) X(pointer_invalid) \
  X(memory_type_invalid) X(no_memory) X(canceled) X(batch_full) X(batch_refused) X(internal)

errc public_code(Errc c) {
  switch (c) {
#define GPUFILE_TO_PUBLIC(name) \
  case Errc::name: return errc::name;
    GPUFILE_BOTH_CODES(GPUFILE_TO_PUBLIC)
#undef GPUFILE_TO_PUBLIC
    case Errc::ok:
    case Errc::system: break;
  }
  return errc::internal;
}

Errc internal_code(errc c) {
  switch (c) {
#define GPUFILE_TO_INTERNAL(name) \
  case errc::name: return Errc::name;
    GPUFILE_BOTH_CODES(GPUFILE_TO_INTERNAL)
#undef GPUFILE_TO_INTERNAL
    case errc::driver_open: break;
  }
  return Errc::internal;
}

std::error_code code_of(const Error& e) {
  if (e.code == Errc::system) return {e.sys_errno, std::generic_category()};
  return make_error_code(public_code(e.code));
}

// std::system_error appends ": " and the code's message to what().
void raise(const Error& e, std::string_view what, std::string_view path) {
  std::string context(what);
  if (!path.empty()) context.append(" ").append(path);
  if (e.code == Errc::cuda) context += " (CUresult " + std::to_string(e.cu_result) + ")";
  throw Exception(code_of(e), context, e.code == Errc::cuda ? e.cu_result : 0);
}

void raise_text(const Error& e, std::string_view message) {
  throw Exception(code_of(e), std::string(message), e.code == Errc::cuda ? e.cu_result : 0);
}

void raise(errc code, std::string_view message) {
  throw Exception(make_error_code(code), std::string(message));
}

}  // namespace cppapi
}  // namespace gpufile
