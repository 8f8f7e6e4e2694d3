// Fuzz target: gdsio job files, as `gpufile bench JOBFILE` reads them: the text layer
// (parse_job_file: sections, keys, comments) and then each job's options (job_options: the
// values, the [global] overrides, what a job must have). Nothing is run.
//
// Beyond "no crash, no sanitizer report, no exception", every input must keep these:
//   1. an error names the file ("PATH:LINE: ..." or "PATH: ...");
//   2. a parsed file has at least one job; section names, keys and values are non-empty,
//      trimmed and hold no NUL byte (a path or a number cut short at a NUL would be read as
//      something the file does not say); keys are known; line numbers lie within the file;
//   3. the parsed file written back as text parses to the same sections and settings;
//   4. each job's options are in range: size > 0, threads 1..4096, GPU 0..1023, NUMA node
//      -1..1023, transfer type 0..7, exactly one of file and directory, IO sizes with
//      0 < min <= max, and every drawn IO size between them in whole granules; and they pass
//      the same check as the command line's (options_problem).
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cli/bench/io_sizes.hpp"
#include "cli/bench/jobfile.hpp"
#include "cli/bench/jobs.hpp"
#include "cli/bench/options.hpp"

namespace {

using namespace gpufile::cli::benchmark;

constexpr const char* kPath = "fuzz.gdsio";

void check(bool ok, const char* invariant, std::string_view input) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_gdsio_jobfile: invariant broken: %s\ninput: %.*s\n", invariant,
               static_cast<int>(input.size()), input.data());
  std::abort();
}

bool clean(const std::string& s) {
  if (s.empty() || s.find('\0') != std::string::npos) return false;
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  return !space(s.front()) && !space(s.back());
}

bool known(const std::string& key) {
  for (const std::string& k : job_file_keys())
    if (k == key) return true;
  return false;
}

void append(std::string* text, const JobSection& section) {
  *text += "[" + section.name + "]\n";
  for (const auto& [key, setting] : section.settings) *text += key + "=" + setting.value + "\n";
}

// The file as text again: [global] (when it had one) first, then the jobs in order.
std::string written_back(const JobFile& f) {
  std::string text;
  if (!f.global.name.empty()) append(&text, f.global);
  for (const JobSection& job : f.jobs) append(&text, job);
  return text;
}

bool same(const JobSection& a, const JobSection& b) {
  if (a.name != b.name || a.settings.size() != b.settings.size()) return false;
  for (const auto& [key, setting] : a.settings) {
    auto it = b.settings.find(key);
    if (it == b.settings.end() || it->second.value != setting.value) return false;
  }
  return true;
}

void check_section(const JobSection& s, int lines, std::string_view text) {
  check(clean(s.name), "a section name is clean", text);
  check(s.line >= 1 && s.line <= lines, "a header's line lies within the file", text);
  for (const auto& [key, setting] : s.settings) {
    check(clean(key) && known(key), "a key is clean and known", text);
    check(clean(setting.value), "a value is clean", text);
    check(setting.line > s.line && setting.line <= lines, "a setting's line follows its header",
          text);
  }
}

void check_options(const Options& o, std::string_view text) {
  check(o.size > 0, "size > 0", text);
  check(o.threads >= 1 && o.threads <= 4096, "num_threads 1..4096", text);
  check(o.gpu >= 0 && o.gpu <= 1023, "gpu_dev_id 0..1023", text);
  check(o.numa_node >= -1 && o.numa_node <= 1023, "numa_node -1..1023", text);
  const int xfer = static_cast<int>(o.xfer);
  check(xfer >= 0 && xfer <= 7, "xfer_type 0..7", text);
  check(o.file.empty() != o.dir.empty(), "exactly one of filename and directory", text);
  check(o.seconds >= 0, "runtime >= 0", text);
  const IoSizes sizes = io_sizes_of(o);
  check(sizes.min > 0 && sizes.min <= sizes.max, "0 < IO size min <= max", text);
  check(o.io_size == sizes.max, "the buffers hold the largest IO", text);
  const uint64_t granule = sizes.granule();
  check(granule > 0, "a granule > 0", text);
  std::mt19937_64 rng(o.size);
  for (int k = 0; k < 8; ++k) {
    const uint64_t n = sizes.draw(rng);
    check(n >= sizes.min && n <= sizes.max && n % granule == 0,
          "a drawn IO size lies in [min, max] in whole granules", text);
  }
  check(options_problem(o).empty(), "the options pass the command line's check", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  int lines = 1;
  for (char c : text) lines += c == '\n';

  JobFile f;
  std::string error;
  if (!parse_job_file(text, kPath, &f, &error)) {
    check(error.rfind(std::string(kPath) + ":", 0) == 0, "an error names the file", text);
    return 0;
  }
  check(!f.jobs.empty(), "a parsed file has a job", text);
  if (!f.global.name.empty()) check_section(f.global, lines, text);
  for (const JobSection& job : f.jobs) check_section(job, lines, text);

  JobFile back;
  check(parse_job_file(written_back(f), kPath, &back, &error), "the file written back parses",
        text);
  check(back.jobs.size() == f.jobs.size() && same(back.global, f.global),
        "the file written back has the same sections", text);
  for (size_t k = 0; k < f.jobs.size(); ++k)
    check(same(back.jobs[k], f.jobs[k]), "the file written back has the same settings", text);

  std::vector<Options> jobs;
  if (!job_options(f, &jobs, &error)) {
    check(error.rfind(std::string(kPath) + ":", 0) == 0, "an error names the file", text);
    return 0;
  }
  check(jobs.size() == f.jobs.size(), "one set of options per job", text);
  for (const Options& o : jobs) check_options(o, text);
  return 0;
}
