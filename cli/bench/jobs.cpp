#include "cli/bench/jobs.hpp"

#include <cufile.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <optional>
#include <thread>

#include "cli/bench/device.hpp"
#include "cli/bench/lanes.hpp"
#include "cli/bench/numa.hpp"
#include "cli/bench/run.hpp"
#include "cli/commands.hpp"

namespace gpufile::cli::benchmark {
namespace {

// ---- settings to options ----------------------------------------------------------------

std::string int_value(const std::string& text, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno || end == text.c_str() || *end != '\0' || v < lo || v > hi)
    return "expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  *out = static_cast<int>(v);
  return {};
}

std::string flag_value(const std::string& text, bool* out) {
  int v = 0;
  std::string why = int_value(text, 0, 1, &v);
  if (why.empty()) *out = v == 1;
  return why;
}

std::string rw_value(const std::string& text, IoType* out) {
  static const char* names[] = {"read", "write", "randread", "randwrite"};
  for (int k = 0; k < 4; ++k)
    if (text == names[k]) return *out = static_cast<IoType>(k), std::string();
  return "expected read, write, randread or randwrite";
}

std::string size_value(const std::string& text, uint64_t* out) {
  unsigned long long v = 0;
  if (!parse_size(text.c_str(), &v) || v == 0) return "expected a size > 0 (binary K/M/G)";
  *out = v;
  return {};
}

std::string bs_value(const std::string& text, Options* o) {
  IoSizes sizes;
  std::string why;
  if (!parse_io_sizes(text, &sizes, &why)) return why;
  set_io_sizes(o, sizes);
  return {};
}

// One key into the options; the reason when its value is bad.
std::string apply_key(const std::string& key, const std::string& value, Options* o) {
  int v = 0;
  bool unused = false;
  if (key == "name") return {};  // a label for people; gdsio prints it nowhere either
  if (key == "xfer_type") {
    std::string why = int_value(value, 0, 7, &v);
    if (!why.empty()) return "no such transfer type (0 to 7)";
    o->xfer = static_cast<Xfer>(v);
    return {};
  }
  if (key == "rw") return rw_value(value, &o->io_type);
  if (key == "bs") return bs_value(value, o);
  if (key == "size") return size_value(value, &o->size);
  if (key == "runtime") return int_value(value, 0, 1 << 30, &o->seconds);
  if (key == "do_verify") return flag_value(value, &o->verify);
  // gdsio -p: GPU-to-GPU bounce over NVLink inside NVIDIA's library; no such path here.
  if (key == "enable_nvlinks") return flag_value(value, &unused);
  if (key == "numa_node") return int_value(value, 0, 1023, &o->numa_node);
  if (key == "gpu_dev_id") return int_value(value, 0, 1023, &o->gpu);
  if (key == "num_threads") return int_value(value, 1, 4096, &o->threads);
  if (key == "directory") return o->dir = value, std::string();
  if (key == "filename") return o->file = value, std::string();
  return "unknown key";  // job_file_keys() and this list go together
}

// What a job must have once [global] and its own settings are merged; empty when complete.
std::string missing_in(const JobFile& file, const JobSection& job, const Options& o) {
  const bool has_dir = file.find(job, "directory"), has_file = file.find(job, "filename");
  if (has_dir == has_file)
    return has_dir ? "directory and filename are both set; a job takes one"
                   : "no directory or filename: give the job one";
  for (const char* key : {"rw", "bs", "size"})
    if (!file.find(job, key)) return std::string("no ") + key + " in the job or in [global]";
  if (is_batch(o.xfer) && o.threads > 128)
    return "xfer_type 6 and 7 allow at most 128 IOs per batch (num_threads)";
  return options_problem(o);
}

// The line that gave `job` its `key` (its header when the value is the default).
int line_of(const JobFile& file, const JobSection& job, const char* key) {
  const JobSetting* s = file.find(job, key);
  return s ? s->line : job.line;
}

// "rw=write in [job2]", or "rw left at its default in [job2]".
std::string setting_in(const JobFile& file, const JobSection& job, const char* key) {
  const JobSetting* s = file.find(job, key);
  return std::string(key) + (s ? "=" + s->value : " left at its default") + " in [" + job.name +
         "]";
}

// The jobs share one result line: one IoType, one XferType, one verification pass.
bool jobs_agree(const JobFile& file, const std::vector<Options>& jobs, std::string* error) {
  const auto differs = [](const Options& a, const Options& b, const std::string& key) {
    if (key == "rw") return a.io_type != b.io_type;
    if (key == "xfer_type") return a.xfer != b.xfer;
    return a.verify != b.verify;
  };
  for (size_t k = 1; k < jobs.size(); ++k)
    for (const char* key : {"rw", "xfer_type", "do_verify"})
      if (differs(jobs[0], jobs[k], key)) {
        *error = file.at(line_of(file, file.jobs[k], key),
                         setting_in(file, file.jobs[k], key) + " differs from " +
                             setting_in(file, file.jobs[0], key) +
                             "; the jobs of a file report one line together, so they share "
                             "rw, xfer_type and do_verify");
        return false;
      }
  return true;
}

// ---- running ---------------------------------------------------------------------------

struct Job {
  std::string name;
  Options options;
  Gpu gpu;
};

// The start of every job's clock. Each job sets up on its own and then waits here; all
// start when the last one is ready, and none starts when one of them could not set up.
class StartLine {
 public:
  explicit StartLine(size_t jobs) : waiting_(static_cast<std::ptrdiff_t>(jobs)) {}
  bool ready() {
    waiting_.arrive_and_wait();
    return !gave_up_.load();
  }
  void give_up() {
    gave_up_.store(true);  // before the count: whoever the latch releases sees it
    waiting_.count_down();
  }

 private:
  std::latch waiting_;
  std::atomic<bool> gave_up_{false};
};

std::optional<Result> run_job(const Job& job, IoType type, StartLine& line) {
  job.gpu.bind_thread();  // the batch types do their IO on this thread
  bool arrived = false;
  RunHooks hooks;
  hooks.progress = false;  // one line per job would overwrite the others'
  hooks.cancelled = "[" + job.name + "] did not start: another job could not set up";
  hooks.at_start = [&] {
    arrived = true;
    return line.ready();
  };
  std::optional<Result> r = measure_run(job.gpu, job.options, type, hooks);
  if (!arrived) line.give_up();
  if (r) r->job = job.name;
  return r;
}

// Every job at once; their results in job order, or empty when any of them failed.
std::optional<std::vector<Result>> run_together(const std::vector<Job>& jobs, IoType type) {
  StartLine line(jobs.size());
  std::vector<std::optional<Result>> results(jobs.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < jobs.size(); ++k)
    threads.emplace_back([&, k] { results[k] = run_job(jobs[k], type, line); });
  for (std::thread& t : threads) t.join();
  std::vector<Result> done;
  for (std::optional<Result>& r : results) {
    if (!r) return std::nullopt;
    done.push_back(std::move(*r));
  }
  return done;
}

// -J: each job's line first; then the total, the line gdsio prints.
void report(const std::vector<Result>& parts, const Options& cli, Pass pass) {
  std::FILE* to = line_stream(cli);
  if (cli.per_job_stats)
    for (const Result& part : parts) {
      print_line(part, to);
      if (cli.json) add_json_result(part, pass, Scope::job);
    }
  const Result all = combine_results(parts);
  print_line(all, to);
  if (cli.json) add_json_result(all, pass, Scope::total);
  std::fflush(to);
}

// The run, and after a verified write the read-back of every job (one pass each).
int run_jobs(std::vector<Job> jobs, const Options& cli) {
  const Options& first = jobs.front().options;
  const IoType type = first.io_type;
  std::optional<std::vector<Result>> parts = run_together(jobs, type);
  if (!parts) return 1;
  report(*parts, cli, Pass::measure);
  if (!(first.verify && is_write(type))) return 0;
  std::fprintf(line_stream(cli), "Verifying data\n");
  for (Job& job : jobs) job.options.seconds = 0;
  parts = run_together(jobs, read_back_of(type));
  if (!parts) return 1;
  report(*parts, cli, Pass::read_back);
  return 0;
}

// numa_node names a node of this machine.
bool nodes_exist(const JobFile& file, const std::vector<Options>& jobs, std::string* error) {
  for (size_t k = 0; k < jobs.size(); ++k) {
    cpu_set_t cpus;
    std::string why;
    if (jobs[k].numa_node >= 0 && !numa_node_cpus(jobs[k].numa_node, &cpus, &why))
      return *error = file.at(line_of(file, file.jobs[k], "numa_node"), why), false;
  }
  return true;
}

bool open_gpus(std::vector<Job>* jobs) {
  size_t opened = 0;
  for (; opened < jobs->size(); ++opened)
    if (!(*jobs)[opened].gpu.open((*jobs)[opened].options.gpu)) break;
  if (opened == jobs->size()) return true;
  for (size_t k = 0; k < opened; ++k) (*jobs)[k].gpu.close();
  return false;
}

}  // namespace

bool job_options(const JobFile& file, std::vector<Options>* out, std::string* error) {
  out->clear();
  for (const JobSection& job : file.jobs) {
    Options o;
    for (const std::string& key : job_file_keys()) {
      const JobSetting* s = file.find(job, key);
      const std::string why = s ? apply_key(key, s->value, &o) : std::string();
      if (!why.empty()) return *error = file.at(s->line, key + "=" + s->value + ": " + why), false;
    }
    const std::string missing = missing_in(file, job, o);
    if (!missing.empty()) {
      *error = file.at(job.line, "[" + job.name + "]: " + missing);
      return false;
    }
    out->push_back(o);
  }
  return jobs_agree(file, *out, error);
}

int run_job_file(const Options& cli) {
  JobFile file;
  std::vector<Options> options;
  std::string error;
  if (!load_job_file(cli.job_file, &file, &error) || !job_options(file, &options, &error) ||
      !nodes_exist(file, options, &error))
    return std::fprintf(stderr, "gpufile bench: %s\n", error.c_str()), 2;
  std::vector<Job> jobs;
  for (size_t k = 0; k < options.size(); ++k) {
    if (!lanes_fit(options[k])) return 1;
    options[k].start_at = cli.start_at;  // every job's clock starts at the same moment
    jobs.push_back(Job{file.jobs[k].name, options[k], Gpu{}});
  }
  if (!open_gpus(&jobs)) return 1;
  int rc = 1;
  if (open_session(jobs.front().gpu, jobs.front().options.xfer)) {
    rc = run_jobs(jobs, cli);
    cuFileDriverClose();
  }
  for (Job& job : jobs) job.gpu.close();
  return rc;
}

}  // namespace gpufile::cli::benchmark
