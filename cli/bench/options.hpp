// `gpufile bench` command line: gdsio's flags (spec §6.1) and the few of our own.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/bench/io_sizes.hpp"

namespace gpufile::cli::benchmark {

// -x values, in gdsio's numbering (spec §6.2).
enum class Xfer {
  gpu_direct = 0,        // cuFileRead/Write into GPU memory
  cpu_only = 1,          // cuFileRead/Write into host memory
  cpu_gpu = 2,           // pread/pwrite with O_DIRECT into pinned memory, copy to/from the GPU
  cpu_async_gpu = 3,     // as 2 with two pinned buffers: a read's copy overlaps the next read
  cpu_cached_gpu = 4,    // as 2 through the page cache
  gpu_direct_async = 5,  // cuFileReadAsync/WriteAsync, one IO at a time
  gpu_batch = 6,         // cuFileBatchIO*, -w IOs per batch
  gpu_batch_stream = 7,  // -w cuFileReadAsync/WriteAsync on one stream, one synchronisation
};

const char* xfer_label(Xfer x);  // the XferType: label of gdsio's result line
bool uses_gpu_memory(Xfer x);
// The batch types: -w is the number of IOs in flight from one thread (gdsio's IoDepth).
bool is_batch(Xfer x);
// The types that do plain POSIX IO and copy with the driver, without cuFile.
bool uses_posix_io(Xfer x);

// -I values, in gdsio's numbering.
enum class IoType { read = 0, write = 1, randread = 2, randwrite = 3 };

const char* io_label(IoType t);
bool is_write(IoType t);
bool is_random(IoType t);
IoType read_back_of(IoType t);  // what -V reads after a write of this type

// The live progress line on stderr (progress.hpp).
enum class Progress { automatic, always, never };

struct Options {
  std::string file;  // -f
  std::string dir;   // -D
  int gpu = 0;
  int threads = 1;
  int numa_node = -1;  // -n: IO threads run on this NUMA node's CPUs; -1: anywhere
  uint64_t size = 0;
  // -i: bytes per IO. With a range (-i MIN:MAX:STEP) io_size is MAX, so every buffer sized by
  // it holds any IO, and io_min and io_step are set; they are 0 with a single size.
  uint64_t io_size = 0;
  uint64_t io_min = 0;
  uint64_t io_step = 0;
  uint64_t offset = 0;
  Xfer xfer = Xfer::gpu_direct;
  IoType io_type = IoType::read;
  int seconds = 0;  // 0: one pass over the data set
  uint64_t seed = 0;
  bool verify = false;
  bool skip_buf_register = false;
  // -m: the memory of the IO buffers of -x 0, 5, 6 and 7, in gdsio's numbering: 0 cudaMalloc,
  // 2 cudaMallocHost (pinned host memory), 3 malloc (pageable; 4 KiB-aligned here). gdsio's
  // 1 (cuMem VMM) and 4 (mmap) are not implemented.
  int memory = 0;
  bool buffered = false;
  bool json = false;
  Progress progress = Progress::automatic;  // --progress, --no-progress
  // Sweeps: one measurement per (IO size, threads); empty: the -i or -w value alone.
  std::vector<uint64_t> sweep_io;  // --sweep-io
  std::vector<int> sweep_threads;  // --sweep-threads
  std::string csv_path;            // --csv: a row per measurement
  bool per_job_stats = false;      // -J: with a job file, each job's line before the total
  // --start-at: the clock starts at this moment (seconds since the epoch) once set-up is done,
  // so that processes started together time the same stretch; 0: as soon as set-up is done.
  double start_at = 0;
  std::string job_file;            // `gpufile bench JOBFILE`: every run setting comes from it
  bool help = false;
};

// -i as IoSizes, and back.
IoSizes io_sizes_of(const Options& o);
void set_io_sizes(Options* o, const IoSizes& s);

// Whether -m may go with this transfer type (gdsio: only the cuFile types on "GPU" buffers).
bool takes_memory_flag(Xfer x);

// Whether files are opened with O_DIRECT (neither -O 1 nor -x 4).
bool opens_direct(const Options& o);

void print_usage(FILE* f);

// False, with a message on stderr, on anything malformed or inconsistent. A single argument
// that is not a flag is a job file (then only -J and --json may come with it).
bool parse_options(int argc, char** argv, Options* o);

// What makes a complete set of options unrunnable (the combinations no flag catches on its
// own), or empty. Job files are checked with it too.
std::string options_problem(const Options& o);

}  // namespace gpufile::cli::benchmark
