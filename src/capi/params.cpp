// cuFile's configuration parameter API (cuFileSet/GetParameter*, spec §3.4).
//
// Set* stages a value for the next driver open and is refused while the driver is open. Get*
// reports the open driver's value, or, while closed, the staged value (or what cuFile reports
// for an unstaged one). Values are range-checked at open, not here, as cuFile does.
#include <cstring>
#include <string>

#include "core/config.hpp"
#include "core/log.hpp"
#include "capi/capi.hpp"
#include "cufile.h"
#include "exec/driver_state.hpp"

#define GPUFILE_EXPORT __attribute__((visibility("default")))

namespace gpufile::config {
// The parameter ids in core/config.hpp mirror cuFile's enums one to one.
static_assert(static_cast<int>(SizeParam::count) == CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS + 1);
static_assert(static_cast<int>(SizeParam::poll_threshold_size_kb) == CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB);
static_assert(static_cast<int>(SizeParam::max_direct_io_size_kb) ==
              CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB);
static_assert(static_cast<int>(BoolParam::count) == CUFILE_PARAM_STREAM_MEMOPS_BYPASS + 1);
static_assert(static_cast<int>(BoolParam::profile_nvtx) == CUFILE_PARAM_PROFILE_NVTX);
static_assert(static_cast<int>(BoolParam::use_pci_p2pdma) == CUFILE_PARAM_USE_PCIP2PDMA);
static_assert(static_cast<int>(StringParam::count) == CUFILE_PARAM_LOG_DIR + 1);
static_assert(static_cast<int>(StringParam::env_logfile_path) == CUFILE_PARAM_ENV_LOGFILE_PATH);
}  // namespace gpufile::config

namespace {

using namespace gpufile;

// A string parameter longer than a path cannot be meant.
constexpr size_t kMaxStringParam = 4096;

using capi::result_of;

using capi::catch_all;

// C callers may pass any int as a cuFile enum. Loading such a value as the C++ enum type is
// undefined outside the enumerators' range, so the id is read from the parameter's bytes into
// config's enums, which have a fixed underlying type.
template <typename Id, typename CEnum>
Id param_id(const CEnum& param) {
  static_assert(sizeof(CEnum) == sizeof(int));
  int raw;
  std::memcpy(&raw, &param, sizeof raw);
  return static_cast<Id>(raw);
}

// Reads a value from the open driver's settings, or from the staging area when closed.
template <typename T, typename FromSettings, typename FromStaged>
T current(FromSettings from_settings, FromStaged from_staged) {
  T value{};
  if (!with_open_settings([&](Settings& s) { value = from_settings(s); })) value = from_staged();
  return value;
}

}  // namespace

extern "C" {

GPUFILE_EXPORT CUfileError_t cuFileSetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t value) {
  return catch_all(__func__, [&] {
    auto p = param_id<config::SizeParam>(param);
    if (!config::is_known(p)) return result_of(CU_FILE_INVALID_VALUE);
    if (driver_is_open()) return result_of(CU_FILE_DRIVER_ALREADY_OPEN);
    config::stage_size(p, value);
    return result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileSetParameterBool(CUFileBoolConfigParameter_t param, bool value) {
  return catch_all(__func__, [&] {
    auto p = param_id<config::BoolParam>(param);
    if (!config::is_known(p)) return result_of(CU_FILE_INVALID_VALUE);
    if (driver_is_open()) return result_of(CU_FILE_DRIVER_ALREADY_OPEN);
    config::stage_bool(p, value);
    return result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileSetParameterString(CUFileStringConfigParameter_t param,
                                                      const char* desc_str) {
  return catch_all(__func__, [&] {
    auto p = param_id<config::StringParam>(param);
    if (!config::is_known(p) || !desc_str) return result_of(CU_FILE_INVALID_VALUE);
    const size_t len = strnlen(desc_str, kMaxStringParam);
    if (len == kMaxStringParam) return result_of(CU_FILE_INVALID_VALUE);
    if (driver_is_open()) return result_of(CU_FILE_DRIVER_ALREADY_OPEN);
    config::stage_string(p, std::string_view(desc_str, len));
    return result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileGetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t* value) {
  return catch_all(__func__, [&] {
    auto p = param_id<config::SizeParam>(param);
    if (!config::is_known(p) || !value) return result_of(CU_FILE_INVALID_VALUE);
    *value = current<size_t>([&](const Settings& s) { return config::size_value(s, p); },
                             [&] { return config::staged_size(p); });
    return result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileGetParameterBool(CUFileBoolConfigParameter_t param, bool* value) {
  return catch_all(__func__, [&] {
    auto p = param_id<config::BoolParam>(param);
    if (!config::is_known(p) || !value) return result_of(CU_FILE_INVALID_VALUE);
    *value = current<bool>([&](const Settings& s) { return config::bool_value(s, p); },
                           [&] { return config::staged_bool(p); });
    return result_of(CU_FILE_SUCCESS);
  });
}

// The value and its terminating NUL must fit in len bytes; a value that does not fit is
// refused (CU_FILE_INVALID_VALUE, buffer untouched) rather than silently truncated.
GPUFILE_EXPORT CUfileError_t cuFileGetParameterString(CUFileStringConfigParameter_t param,
                                                      char* desc_str, int len) {
  return catch_all(__func__, [&] {
    auto p = param_id<config::StringParam>(param);
    if (!config::is_known(p) || !desc_str || len <= 0) return result_of(CU_FILE_INVALID_VALUE);
    const std::string v = current<std::string>(
        [&](const Settings& s) { return config::string_value(s, p); },
        [&] { return config::staged_string(p); });
    // NVIDIA's library refuses the log file's path while none is set (it is the environment's
    // CUFILE_LOGFILE_PATH), open or not (tests/conformance/expected/nvidia.txt).
    if (p == config::StringParam::env_logfile_path && v.empty())
      return result_of(CU_FILE_INVALID_VALUE);
    if (v.size() >= static_cast<size_t>(len)) {
      GPUFILE_LOG(LogLevel::error, "%s: value needs %zu bytes, buffer has %d", __func__,
                  v.size() + 1, len);
      return result_of(CU_FILE_INVALID_VALUE);
    }
    std::memcpy(desc_str, v.c_str(), v.size() + 1);
    return result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileGetParameterMinMaxValue(CUFileSizeTConfigParameter_t param,
                                                           size_t* min_value, size_t* max_value) {
  return catch_all(__func__, [&] {
    if (!min_value || !max_value) return result_of(CU_FILE_INVALID_VALUE);
    auto range = config::size_range(param_id<config::SizeParam>(param));
    if (!range) return result_of(CU_FILE_INVALID_VALUE);  // PROFILE_STATS too, as cuFile
    *min_value = range->min;
    *max_value = range->max;
    return result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileSetParameterPosixPoolSlabArray(const size_t* size_values,
                                                                  const size_t* count_values,
                                                                  int len) {
  return catch_all(__func__, [&] {
    if (!size_values || !count_values || len <= 0 ||
        static_cast<size_t>(len) > config::kMaxPosixPoolSlabs)
      return result_of(CU_FILE_INVALID_VALUE);
    if (driver_is_open()) return result_of(CU_FILE_DRIVER_ALREADY_OPEN);
    const size_t n = static_cast<size_t>(len);
    config::stage_posix_pool({size_values, n}, {count_values, n});
    return result_of(CU_FILE_SUCCESS);
  });
}

// len must equal the current number of slabs, as in cuFile.
GPUFILE_EXPORT CUfileError_t cuFileGetParameterPosixPoolSlabArray(size_t* size_values,
                                                                  size_t* count_values, int len) {
  return catch_all(__func__, [&] {
    if (!size_values || !count_values || len <= 0) return result_of(CU_FILE_INVALID_VALUE);
    const config::PosixPool pool = current<config::PosixPool>(
        [](const Settings& s) { return config::posix_pool_value(s); },
        [] { return config::staged_posix_pool(); });
    const size_t n = pool.slab_size_kb.size();
    if (static_cast<size_t>(len) != n || pool.slab_count.size() != n) {
      GPUFILE_LOG(LogLevel::error, "%s: buffer size mismatch: len %d, the pool has %zu slabs",
                  __func__, len, n);
      return result_of(CU_FILE_INVALID_VALUE);
    }
    std::memcpy(size_values, pool.slab_size_kb.data(), n * sizeof(size_t));
    std::memcpy(count_values, pool.slab_count.data(), n * sizeof(size_t));
    return result_of(CU_FILE_SUCCESS);
  });
}

}  // extern "C"
