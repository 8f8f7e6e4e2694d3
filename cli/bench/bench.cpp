// `gpufile bench`: a benchmark that takes gdsio's flags and prints gdsio's result line, so
// scripts written for NVIDIA's tool can be pointed at gpufile unchanged. It drives the public
// cuFile C API exactly as an application would; only -x 2 (CPU_GPU) bypasses it on purpose,
// because that transfer type is the "no GDS" baseline.
//
// The pieces: options (flags), blocks (-V data), device (GPU and buffers), lanes (who reads
// what), movers (one IO per transfer type), batch (-x 6), run (threads and timing), report
// (the result line and JSON).
#include <cufile.h>

#include <cstdio>

#include "cli/bench/device.hpp"
#include "cli/bench/options.hpp"
#include "cli/bench/run.hpp"
#include "cli/commands.hpp"

namespace gpufile::cli {

int bench(int argc, char** argv) {
  using namespace benchmark;
  Options o;
  if (!parse_options(argc, argv, &o)) return print_usage(stderr), 2;
  if (o.help) return print_usage(stdout), 0;
  Gpu gpu;
  if (!gpu.open(o.gpu)) return 1;
  if (!gpu.drv && uses_gpu_memory(o.xfer))
    std::fprintf(stderr, "gpufile bench: no GPU (%s); host memory stands in for GPU memory\n",
                 cuda::why_no_driver().c_str());
  CUfileError_t e = cuFileDriverOpen();
  if (e.err != CU_FILE_SUCCESS) {
    std::fprintf(stderr, "gpufile bench: cuFileDriverOpen: %s\n", CUFILE_ERRSTR(e.err));
    return gpu.close(), 1;
  }
  int rc = run_once(gpu, o, o.io_type) ? 0 : 1;
  if (rc == 0 && o.verify && is_write(o.io_type)) {
    std::printf("Verifying data\n");
    Options check = o;
    check.seconds = 0;  // one pass reads back every block the write left
    rc = run_once(gpu, check, read_back_of(o.io_type)) ? 0 : 1;
  }
  cuFileDriverClose();
  gpu.close();
  return rc;
}

}  // namespace gpufile::cli
