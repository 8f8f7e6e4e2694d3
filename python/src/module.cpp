// gpufile._gpufile: the Python extension. Files (file.cpp), remote objects (remote.cpp), futures,
// device buffers, rows, settings and statistics, over the same runtime that serves the cuFile
// API. IO releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "api/remote_file.hpp"
#include "capi/capi.hpp"
#include "core/config.hpp"
#include "core/redact.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "device_buffer.hpp"
#include "errors.hpp"
#include "exec/runtime.hpp"
#include "file.hpp"
#include "futures.hpp"
#include "remote.hpp"
#include "rows.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace gpufile::py {
namespace {

// ---- settings and statistics -----------------------------------------------------------------

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

nb::object settings() {
  Runtime& rt = Runtime::instance();
  Settings s = rt.is_open() ? rt.settings() : config::resolve().settings;
  return json_loads(config::settings_json(s));
}

void set_setting(const std::string& key, nb::handle value) {
  if (Runtime::instance().is_open())
    raise_message("settings take effect when the driver opens, and it is open: call "
                  "gpufile.driver_close() first (files opened before stay open but stop working)");
  std::string text = nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(value));
  std::string problem = config::stage_json(key, text);
  if (!problem.empty()) throw nb::value_error(problem.c_str());
}

nb::object stats_dict() {
  // Pinned staging memory held now (slabs of the open driver); 0 after driver_close().
  return json_loads(stats::summary_json(stats::snapshot(), cuda::live_pinned_bytes()));
}

// gpufile.stats() adds the HDF5 plugin's histograms to the extension's, then derives their
// percentiles again through this: one derivation (core/stats) for every report.
nb::object latency_summary(const std::vector<uint64_t>& buckets) {
  if (buckets.size() != stats::kLatencyBuckets)
    throw nb::value_error("a latency histogram has 32 buckets");
  uint64_t hist[stats::kLatencyBuckets];
  std::copy(buckets.begin(), buckets.end(), hist);
  return json_loads(stats::latency_json(hist));
}

}  // namespace
}  // namespace gpufile::py

NB_MODULE(_gpufile, m) {
  using namespace gpufile;
  using namespace gpufile::py;
  m.doc() = "gpufile's extension module; use the gpufile package, not this module";
  m.attr("__version__") = GPUFILE_VERSION;
  register_errors(m);

  nb::class_<PyFuture>(m, "Future", "An IO running on gpufile's workers.")
      .def("done", &PyFuture::done, "True once the IO finished (result() then returns at once).")
      .def("result", &PyFuture::result, "timeout"_a = nb::none(),
           "Waits for the IO; returns the bytes moved (fewer than asked only at end of file for a "
           "read) or raises its error. TimeoutError if `timeout` seconds pass first.");

  register_file(m);
  register_remote(m);

  register_device_buffer(m);
  register_rows(m);

  m.def("settings", &settings, "Every setting by its cufile.json key: the open driver's, else what the next open would use.");
  m.def("set_setting", &set_setting, "key"_a, "value"_a,
        "Sets one setting (cufile.json key) for the next driver open; ValueError if refused.");
  m.def("stats", &stats_dict, "Per-operation counters and bytes per data path.");
  m.def("stats_reset", [] { stats::reset(); });
  m.def("_latency_summary", &latency_summary, "buckets"_a,
        "The percentiles of a latency histogram (as in stats()), from its bucket counts.");
  m.def("driver_open", [] {
    if (Error e = Runtime::instance().open()) raise(e, "driver open");
  });
  m.def("driver_close", [] {
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = Runtime::instance().close();
      // As cuFileDriverClose does: read_async/write_async run on the cuFile stream API, whose
      // pinned staging pool would otherwise outlive the driver (found by tests/soak/soak.py).
      if (e.ok() && !Runtime::instance().is_open()) capi::on_driver_closed();
    }
    if (e && e.code != Errc::driver_not_open) raise(e, "driver close");
  });
  m.def("driver_is_open", [] { return Runtime::instance().is_open(); });
  // Opens the session as a file's first IO would, without the GIL, for a loader to run on a
  // thread of its own while it parses headers and allocates (gpufile.safetensors).
  m.def("_open_session", [] {
    Error e;
    {
      nb::gil_scoped_release unlocked;
      e = Runtime::instance().ensure_open();
    }
    if (e) raise(e, "driver open");
  });
  m.def("engine", [] {
    if (Error e = Runtime::instance().ensure_open()) raise(e, "driver open");
    return Runtime::instance().engine_name();
  }, "The IO engine of the open driver (io_uring or posix); opens the driver if needed.");
  // s3:// buckets for gpufile.zarr's store: listing and deleting (docs/remote.md). The XML is
  // parsed in Python.
  m.def("_s3_list_page", [](const std::string& url, const std::string& prefix,
                            const std::string& delimiter, const std::string& continuation,
                            unsigned max_keys) {
    remote::ListPage page{prefix, delimiter, continuation, max_keys};
    std::string xml;
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = api::list_objects(url, page, &xml);
    }
    if (!f.ok()) raise_os(f.err, f.message, url);
    return nb::bytes(xml.data(), xml.size());
  }, "url"_a, "prefix"_a, "delimiter"_a, "continuation"_a, "max_keys"_a = 1000,
        "One page of ListObjectsV2 of the bucket of an s3:// URL: the reply's XML.");
  m.def("_s3_delete", [](const std::string& url) {
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = api::delete_object(url);
    }
    if (!f.ok()) raise_os(f.err, f.message, url);
  }, "url"_a, "Deletes an s3:// object (a missing key is no error, as S3 answers).");
  m.def("_remote_get", [](const std::string& url, uint64_t max_bytes) {
    remote::WholeObject whole;
    remote::Failure f;
    {
      nb::gil_scoped_release unlocked;
      f = api::get_object(url, max_bytes, &whole);
    }
    if (!f.ok()) raise_os(f.err, f.message, url);
    return nb::bytes(whole.bytes.data(), whole.bytes.size());
  }, "url"_a, "max_bytes"_a = UINT64_MAX,
        "A whole http(s):// or s3:// object in one GET, without the HEAD an open sends: its bytes.");
  // The Python layer's messages about URLs (gpufile.safetensors, gpufile.zarr) hide what the C++
  // ones hide, by the same code (src/core/redact.hpp).
  m.def("_redact_url", [](const std::string& url) { return redact_url(url); }, "url"_a,
        "The URL as messages show it: signatures, tokens and passwords replaced by REDACTED.");
  m.def("_redact_text", [](const std::string& text) { return redact_text(text); }, "text"_a,
        "`text` with every URL in it passed through _redact_url.");
  m.def("cuda_available", [] { return cuda::driver() != nullptr; });
  m.def("cuda_unavailable_reason", [] { return cuda::driver() ? std::string() : cuda::why_no_driver(); });
  m.def("device_count", [] {
    const cuda::Driver* d = cuda::driver();
    return d ? d->device_count : 0;
  });
}
