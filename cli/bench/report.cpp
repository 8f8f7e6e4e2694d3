#include "cli/bench/report.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace gpufile::cli::benchmark {

double cpu_seconds_now() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](timeval tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

double gib_per_sec(const Result& r) {
  return r.seconds > 0 ? (r.done_bytes / 1024.0) / r.seconds / (1024.0 * 1024.0) : 0;
}

Result combine_results(const std::vector<Result>& parts) {
  Result all = parts.front();
  all.job.clear();
  for (size_t k = 1; k < parts.size(); ++k) {
    const Result& p = parts[k];
    all.threads += p.threads;
    all.done_bytes += p.done_bytes;
    all.total_bytes += p.total_bytes;
    all.io_min = std::min(all.io_min, p.io_min);
    all.io_max = std::max(all.io_max, p.io_max);
    all.seconds = std::max(all.seconds, p.seconds);
    all.cpu_seconds = std::max(all.cpu_seconds, p.cpu_seconds);
    all.latency_us.insert(all.latency_us.end(), p.latency_us.begin(), p.latency_us.end());
  }
  std::sort(all.latency_us.begin(), all.latency_us.end());
  const bool one_size = std::all_of(parts.begin(), parts.end(), [&](const Result& p) {
    return p.io_min == p.io_max && p.io_size == all.io_size;
  });
  if (!one_size && !all.latency_us.empty()) all.io_size = all.done_bytes / all.latency_us.size();
  return all;
}

void print_line(const Result& r, std::FILE* to) {
  if (!r.job.empty()) std::fprintf(to, "[%s] ", r.job.c_str());
  std::fprintf(to, "IoType: %s XferType: %s Threads: ", io_label(r.type), xfer_label(r.xfer));
  if (is_batch(r.xfer)) std::fprintf(to, "1 IoDepth: %d", r.threads);
  else std::fprintf(to, "%d", r.threads);
  std::fprintf(to, " DataSetSize: %llu/%llu(KiB) IOSize: %llu(KiB) Throughput: %f GiB/sec, "
                   "Avg_Latency: %f usecs ops: %zu total_time %f secs\n",
               static_cast<unsigned long long>(r.done_bytes / 1024),
               static_cast<unsigned long long>(r.total_bytes / 1024),
               static_cast<unsigned long long>(r.io_size / 1024), gib_per_sec(r),
               mean(r.latency_us), r.latency_us.size(), r.seconds);
}

std::FILE* line_stream(const Options& o) { return o.json ? stderr : stdout; }

namespace {

// Job names come from a job file's section headers: escaped as JSON strings.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

const char* pass_name(Pass p) { return p == Pass::measure ? "measure" : "read_back"; }
const char* scope_name(Scope s) {
  switch (s) {
    case Scope::run: return "run";
    case Scope::job: return "job";
    case Scope::total: break;
  }
  return "total";
}

std::vector<std::string>& json_results() {
  static std::vector<std::string> results;  // one command per process
  return results;
}

}  // namespace

std::string json_object(const Result& r, Pass pass, Scope scope) {
  const bool batch = is_batch(r.xfer);
  const double gib = r.done_bytes / double(1ull << 30);
  std::string out = std::string("{\"pass\": \"") + pass_name(pass) + "\", \"scope\": \"" +
                    scope_name(scope) + "\", ";
  if (!r.job.empty()) out += "\"job\": " + json_string(r.job) + ", ";
  char fields[1024];
  std::snprintf(fields, sizeof fields,
                "\"io_type\": \"%s\", \"xfer_type\": \"%s\", \"threads\": %d, \"io_depth\": %d, "
                "\"dataset_done_kib\": %llu, \"dataset_total_kib\": %llu, \"io_size_kib\": %llu, "
                "\"io_size_min_kib\": %llu, \"io_size_max_kib\": %llu, "
                "\"throughput_gib_s\": %f, \"avg_latency_us\": %f, \"ops\": %zu, "
                "\"total_time_s\": %f, \"p50_latency_us\": %f, \"p99_latency_us\": %f, "
                "\"max_latency_us\": %f, \"cpu_s_per_gib\": %f}",
                io_label(r.type), xfer_label(r.xfer), batch ? 1 : r.threads, batch ? r.threads : 1,
                static_cast<unsigned long long>(r.done_bytes / 1024),
                static_cast<unsigned long long>(r.total_bytes / 1024),
                static_cast<unsigned long long>(r.io_size / 1024),
                static_cast<unsigned long long>(r.io_min / 1024),
                static_cast<unsigned long long>(r.io_max / 1024), gib_per_sec(r),
                mean(r.latency_us), r.latency_us.size(), r.seconds,
                percentile(r.latency_us, 0.5), percentile(r.latency_us, 0.99),
                percentile(r.latency_us, 1.0), gib > 0 ? r.cpu_seconds / gib : 0.0);
  return out + fields;
}

void add_json_result(const Result& r, Pass pass, Scope scope) {
  json_results().push_back(json_object(r, pass, scope));
}

void print_json_document(bool ok) {
  std::printf("{\"ok\": %s, \"results\": [", ok ? "true" : "false");
  const std::vector<std::string>& all = json_results();
  for (size_t k = 0; k < all.size(); ++k) std::printf("%s%s", k ? ",\n  " : "\n  ", all[k].c_str());
  std::printf("%s]}\n", all.empty() ? "" : "\n");
  std::fflush(stdout);
}

std::string csv_header() {
  return "io_type,xfer,threads,io_depth,io_size_bytes,gib_per_s,iops,avg_latency_us,p50_us,"
         "p99_us,max_us,cpu_s_per_gib,bytes,seconds\n";
}

std::string csv_row(const Result& r) {
  const bool batch = is_batch(r.xfer);
  const double ops = static_cast<double>(r.latency_us.size());
  const double gib = r.done_bytes / double(1ull << 30);
  char row[512];
  std::snprintf(row, sizeof row, "%s,%s,%d,%d,%llu,%f,%f,%f,%f,%f,%f,%f,%llu,%f\n",
                io_label(r.type), xfer_label(r.xfer), batch ? 1 : r.threads,
                batch ? r.threads : 1, static_cast<unsigned long long>(r.io_size),
                gib_per_sec(r), r.seconds > 0 ? ops / r.seconds : 0.0, mean(r.latency_us),
                percentile(r.latency_us, 0.5), percentile(r.latency_us, 0.99),
                percentile(r.latency_us, 1.0), gib > 0 ? r.cpu_seconds / gib : 0.0,
                static_cast<unsigned long long>(r.done_bytes), r.seconds);
  return row;
}

}  // namespace gpufile::cli::benchmark
