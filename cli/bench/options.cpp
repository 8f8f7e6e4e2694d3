#include "cli/bench/options.hpp"

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cli/commands.hpp"

namespace gpufile::cli::benchmark {

const char* xfer_label(Xfer x) {
  switch (x) {
    case Xfer::gpu_direct: return "GPUD";
    case Xfer::cpu_only: return "CPUONLY";
    case Xfer::cpu_gpu: return "CPU_GPU";
    case Xfer::cpu_async_gpu: return "CPU_ASYNC_GPU";
    case Xfer::cpu_cached_gpu: return "CPU_CACHED_GPU";
    case Xfer::gpu_direct_async: return "GPUD_ASYNC";
    case Xfer::gpu_batch: return "GPU_BATCH";
    case Xfer::gpu_batch_stream: return "GPU_BATCH_STREAM";
  }
  return "?";
}

bool uses_gpu_memory(Xfer x) { return x != Xfer::cpu_only; }
bool takes_memory_flag(Xfer x) { return uses_gpu_memory(x) && !uses_posix_io(x); }
bool is_batch(Xfer x) { return x == Xfer::gpu_batch || x == Xfer::gpu_batch_stream; }
bool uses_posix_io(Xfer x) {
  return x == Xfer::cpu_gpu || x == Xfer::cpu_async_gpu || x == Xfer::cpu_cached_gpu;
}

const char* io_label(IoType t) {
  static const char* names[] = {"READ", "WRITE", "RANDREAD", "RANDWRITE"};
  return names[static_cast<int>(t)];
}
bool is_write(IoType t) { return t == IoType::write || t == IoType::randwrite; }
bool is_random(IoType t) { return t == IoType::randread || t == IoType::randwrite; }
IoType read_back_of(IoType t) { return is_random(t) ? IoType::randread : IoType::read; }

IoSizes io_sizes_of(const Options& o) {
  if (o.io_step == 0) return IoSizes{o.io_size, o.io_size, 0};
  return IoSizes{o.io_min, o.io_size, o.io_step};
}

void set_io_sizes(Options* o, const IoSizes& s) {
  o->io_size = s.max;
  o->io_min = s.varies() ? s.min : 0;
  o->io_step = s.varies() ? s.step : 0;
}

bool opens_direct(const Options& o) { return !o.buffered && o.xfer != Xfer::cpu_cached_gpu; }

void print_usage(FILE* f) {
  std::fputs(
      "usage: gpufile bench (-f FILE | -D DIR) -s SIZE (-i IOSIZE | --sweep-io LIST) [options]\n"
      "       gpufile bench [-J] [--json] JOBFILE.gdsio\n"
      "  -f FILE   one file shared by all threads, each thread takes an equal slice\n"
      "  -D DIR    one file per thread, DIR/gdsio.<n>\n"
      "  -s SIZE   data set size: of FILE, or of each per-thread file (K/M/G are binary)\n"
      "  -i SIZE   bytes per IO; MIN:MAX:STEP (e.g. 4K:1M:4K) gives each IO a size drawn\n"
      "            from MIN, MIN+STEP, ..., MAX (seeded by -k)\n"
      "  -o SIZE   start offset in the file (0)\n"
      "  -w N      threads; with -x 6 and 7 the number of IOs in flight per batch (1)\n"
      "  -d N      GPU index (0)\n"
      "  -n N      run the IO threads on the CPUs of NUMA node N\n"
      "  -x N      transfer type (0):\n"
      "              0 GPU_DIRECT        cuFileRead/Write into GPU memory\n"
      "              1 CPU_ONLY          cuFileRead/Write into host memory\n"
      "              2 CPU_GPU           pread/pwrite (O_DIRECT) into pinned memory + copy\n"
      "              3 CPU_ASYNC_GPU     as 2 with two pinned buffers: each read's copy to\n"
      "                                  the GPU runs on a stream while the next read runs\n"
      "              4 CPU_CACHED_GPU    as 2 through the page cache (never O_DIRECT)\n"
      "              5 GPU_DIRECT_ASYNC  cuFileReadAsync/WriteAsync, one IO at a time\n"
      "              6 GPU_BATCH         cuFileBatchIOSubmit of -w IOs, then reap them\n"
      "              7 GPU_BATCH_STREAM  -w cuFileReadAsync/WriteAsync queued on one\n"
      "                                  CUDA stream, then one stream synchronisation\n"
      "  -I N      0 read, 1 write, 2 random read, 3 random write (0)\n"
      "  -T SECS   keep going for SECS seconds, wrapping over the data set\n"
      "  -k SEED   seed of the random order and of -V data (0)\n"
      "  -V        verify: write self-checking blocks; check them when reading\n"
      "  -b        leave IO buffers unregistered (no cuFileBufRegister)\n"
      "  -m N      IO buffer memory with -x 0, 5, 6, 7: 0 cudaMalloc, 2 cudaMallocHost\n"
      "            (pinned host), 3 malloc (pageable host) (0)\n"
      "  -O 0|1    0 opens files with O_DIRECT, 1 goes through the page cache (0)\n"
      "  --json    standard output is one JSON document: every result, with latency\n"
      "            percentiles; the result lines go to standard error\n"
      "  --progress, --no-progress\n"
      "            a live line on stderr (time, GiB done, GiB/s, ops) once a second\n"
      "            for runs over about 2 s; default: only when stderr is a terminal\n"
      "  --sweep-io LIST       IO sizes, e.g. 4K,64K,1M,16M (instead of -i)\n"
      "  --sweep-threads LIST  thread counts (batch depths with -x 6, 7), e.g. 1,4,16\n"
      "            one measurement per (IO size, threads) with the other flags as given\n"
      "            (-T per point; without -T one pass over -s), each printing its line\n"
      "  --csv PATH  write every measurement as a CSV row (also without a sweep)\n"
      "            (draw it: python -m gpufile.plot PATH.csv -o chart.png)\n"
      "  JOBFILE   gdsio's job file: [global] then [job1], [job2]...; the jobs run at once\n"
      "            and one line sums them up (docs/bench.md lists the keys)\n"
      "  -J        with a job file, also each job's own line, before the total\n"
      "  --start-at EPOCH  start the clock at EPOCH (seconds since 1970, e.g. $(date +%s) + 5)\n"
      "            once set-up is done: processes started together then time the same\n"
      "            stretch, however long each took to set up (a late one says so)\n",
      f);
}

namespace {

// Long options without a short form: values above any character.
enum LongOnly { kProgress = 256, kNoProgress, kSweepIo, kSweepThreads, kCsv, kPng, kStartAt };

bool parse_int(const char* text, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_u64(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno || end == text || *end != '\0') return false;
  *out = v;
  return true;
}

// --start-at: seconds since the epoch, fractions allowed.
bool parse_epoch(const char* text, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno || end == text || *end != '\0' || !(v > 0)) return false;
  *out = v;
  return true;
}

// -m: gdsio's 0 to 4, of which 0, 2 and 3 are implemented.
bool parse_memory(const char* text, int* out, std::string* why) {
  if (!parse_int(text, 0, 4, out)) return false;
  if (*out == 0 || *out == 2 || *out == 3) return true;
  *why = "not implemented (0 cudaMalloc, 2 cudaMallocHost and 3 malloc are)";
  return false;
}

bool parse_xfer(const char* text, Xfer* out) {
  int v = 0;
  if (!parse_int(text, 0, 7, &v)) return false;
  *out = static_cast<Xfer>(v);
  return true;
}

// A comma list, each item parsed by `one` (false on an item it refuses); false on any bad item.
template <typename T, typename ParseOne>
bool parse_list(const char* text, std::vector<T>* out, ParseOne one) {
  out->clear();
  std::string list = text;
  for (size_t from = 0; from <= list.size();) {
    size_t comma = std::min(list.find(',', from), list.size());
    T v{};
    if (!one(list.substr(from, comma - from).c_str(), &v)) return false;
    out->push_back(v);
    from = comma + 1;
  }
  return true;
}

// "4K,64K,1M": every item a size > 0.
bool parse_size_list(const char* text, std::vector<uint64_t>* out) {
  return parse_list(text, out, [](const char* item, uint64_t* v) {
    unsigned long long n = 0;
    if (!parse_size(item, &n) || n == 0) return false;
    *v = n;
    return true;
  });
}

// "1,4,16": every item a thread count as -w takes it.
bool parse_count_list(const char* text, std::vector<int>* out) {
  return parse_list(text, out, [](const char* item, int* v) { return parse_int(item, 1, 4096, v); });
}

bool parse_byte_size(const char* text, uint64_t* out) {
  unsigned long long v = 0;
  if (!parse_size(text, &v)) return false;
  *out = v;
  return true;
}

bool parse_io_flag(const char* text, Options* o, std::string* why) {
  IoSizes sizes;
  if (!parse_io_sizes(text, &sizes, why)) return false;
  set_io_sizes(o, sizes);
  return true;
}

// One flag and its argument; false on anything malformed, with the reason in `why` where a
// generic "bad value" would not say enough.
bool apply_flag(int c, const char* arg, Options* o, std::string* why) {
  int v = 0;
  switch (c) {
    case 'f': o->file = arg; return true;
    case 'D': o->dir = arg; return true;
    case 'd': return parse_int(arg, 0, 1023, &o->gpu);
    case 'n': return parse_int(arg, 0, 1023, &o->numa_node);
    case 'w': return parse_int(arg, 1, 4096, &o->threads);
    case 's': return parse_byte_size(arg, &o->size);
    case 'i': return parse_io_flag(arg, o, why);
    case 'o': return parse_byte_size(arg, &o->offset);
    case 'x': return parse_xfer(arg, &o->xfer);
    case 'I': return parse_int(arg, 0, 3, &v) && (o->io_type = static_cast<IoType>(v), true);
    case 'T': return parse_int(arg, 1, 1 << 30, &o->seconds);
    case 'k': return parse_u64(arg, &o->seed);
    case 'V': o->verify = true; return true;
    case 'b': o->skip_buf_register = true; return true;
    case 'm': return parse_memory(arg, &o->memory, why);
    case 'O': return parse_int(arg, 0, 1, &v) && (o->buffered = v == 1, true);
    case 'j': o->json = true; return true;
    case 'J': o->per_job_stats = true; return true;
    case kProgress: o->progress = Progress::always; return true;
    case kNoProgress: o->progress = Progress::never; return true;
    case kSweepIo: return parse_size_list(arg, &o->sweep_io);
    case kSweepThreads: return parse_count_list(arg, &o->sweep_threads);
    case kCsv: o->csv_path = arg; return !o->csv_path.empty();
    case kStartAt: return parse_epoch(arg, &o->start_at);
    case kPng:  // the PNG chart moved to Python: point old command lines there
      std::fprintf(stderr, "gpufile bench: --png is gone: write --csv and draw it with "
                           "`python -m gpufile.plot FILE.csv -o %s` (pip install 'gpufile[plot]')\n",
                   arg);
      return false;
    case 'h': o->help = true; return true;
    default: return false;
  }
}

int deepest(const Options& o) {
  int most = o.threads;
  for (int t : o.sweep_threads) most = std::max(most, t);
  return most;
}

// The flags that may come with a job file: the file holds every run setting.
bool goes_with_job_file(int c) { return c == 'J' || c == 'j' || c == 'h' || c == kStartAt; }

bool say_problem(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "gpufile bench: %s\n", problem.c_str());
  return problem.empty();
}

// The flag that failed, and why.
void complain(int c, const char* arg, const option& long_opt, const std::string& why) {
  if (!why.empty())
    std::fprintf(stderr, "gpufile bench: -%c %s: %s\n", c, arg, why.c_str());
  else if (c == 'x')  // gdsio's eight types; the usage below lists them
    std::fprintf(stderr, "gpufile bench: -x %s: no such transfer type (0 to 7)\n", arg);
  else if (c >= kProgress)
    std::fprintf(stderr, "gpufile bench: bad value for --%s: '%s'\n", long_opt.name, arg);
  else
    std::fprintf(stderr, "gpufile bench: bad value for -%c: '%s'\n", c, arg ? arg : "");
}

}  // namespace

std::string options_problem(const Options& o) {
  if (o.file.empty() == o.dir.empty()) return "give exactly one of -f and -D";
  if (o.size == 0) return "-s (data set size) is required and must be > 0";
  if (o.io_size == 0 && o.sweep_io.empty())
    return "-i (IO size) or --sweep-io is required, and sizes must be > 0";
  if (o.memory != 0 && !takes_memory_flag(o.xfer))
    return "-m goes with -x 0, 5, 6 and 7 only (as in gdsio)";
  if (is_batch(o.xfer) && deepest(o) > 128)
    return "-x 6 and -x 7 allow at most 128 IOs per batch (-w, --sweep-threads)";
  // A sweep replaces -i by each of its sizes; those are single sizes, checked as they run.
  if (o.sweep_io.empty()) return io_sizes_problem(io_sizes_of(o), opens_direct(o), o.verify);
  return {};
}

bool parse_options(int argc, char** argv, Options* o) {
  static const option longs[] = {{"json", no_argument, nullptr, 'j'},
                                 {"progress", no_argument, nullptr, kProgress},
                                 {"no-progress", no_argument, nullptr, kNoProgress},
                                 {"sweep-io", required_argument, nullptr, kSweepIo},
                                 {"sweep-threads", required_argument, nullptr, kSweepThreads},
                                 {"csv", required_argument, nullptr, kCsv},
                                 {"png", required_argument, nullptr, kPng},
                                 {"start-at", required_argument, nullptr, kStartAt},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  optind = 1;  // getopt keeps state across calls; start over
  opterr = 0;  // our own messages, with our own name in them
  int c = 0;
  int long_index = 0;
  std::string run_flag;  // the first flag that a job file would override
  while ((c = getopt_long(argc, argv, ":f:D:d:n:w:s:i:o:x:I:T:k:Vbm:O:Jh", longs,
                          &long_index)) != -1) {
    if (c == '?' || c == ':') {
      const char* what = c == ':' ? "missing value for" : "unknown flag";
      std::fprintf(stderr, "gpufile bench: %s %s\n", what, argv[optind - 1]);
      return false;
    }
    std::string why;
    if (!apply_flag(c, optarg, o, &why)) return complain(c, optarg, longs[long_index], why), false;
    if (!goes_with_job_file(c) && run_flag.empty())
      run_flag = c >= kProgress ? std::string("--") + longs[long_index].name
                                : std::string("-") + static_cast<char>(c);
  }
  if (o->help) return true;
  if (argc - optind > 1) {
    std::fprintf(stderr, "gpufile bench: unexpected argument '%s'\n", argv[optind + 1]);
    return false;
  }
  if (optind == argc) return say_problem(options_problem(*o));
  o->job_file = argv[optind];
  if (run_flag.empty()) return true;
  std::fprintf(stderr, "gpufile bench: %s: a job file holds every run setting; only -J, "
                       "--json and --start-at go with it\n", run_flag.c_str());
  return false;
}

}  // namespace gpufile::cli::benchmark
