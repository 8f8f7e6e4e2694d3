// How many workers and how much staging memory a process takes by default, when several
// processes share the host: torchrun and mpirun start one per GPU, and each one sizing itself
// for the whole host would start N times the threads and pin N times the memory that one process
// needs to reach the hardware's ceiling. So a process's automatic budget is computed from its
// share of the online cores (cores / local world size), and N processes together get about what
// one alone gets. Explicit settings (gpufile.workers, gpufile.caller_slabs) always win.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufile::exec {

// The number of processes of this job on this host, from the launcher's environment:
// LOCAL_WORLD_SIZE (torchrun, torch.distributed.launch), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI),
// MPI_LOCALNRANKS (MPICH, Intel MPI); 1 when none is set or none is a positive number.
// `getenv` is the lookup (std::getenv in the library; a table in tests).
unsigned local_world_size(const char* (*getenv)(const char*));
// This process's rank among them (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID), or -1.
int local_rank(const char* (*getenv)(const char*));

struct Budget {
  unsigned cores = 1;         // the share of the online cores the budget is sized for
  unsigned workers = 4;       // IO workers (each with its ring of pinned slabs)
  unsigned caller_slabs = 8;  // slabs that calling threads borrow
  unsigned small_buffers = 64;  // small-IO staging buffers
};

// The automatic budget for a process that is one of `local_world` on a host of `cores` online
// cores. Workers: three per four cores of the share, 2 to 16 (4 to 16 for a process alone, as
// measured: docs/performance.md); caller slabs two per core of the share, at least 8 alone and 4
// shared; small buffers four per core of the share, at least 64 alone and 16 shared.
Budget automatic_budget(unsigned cores, unsigned local_world);

// Page cache a process may keep registered for page-cache DMA (exec/cache_windows.hpp):
// `per_gpu` bytes for each GPU it feeds, the `devices` it sees, shared out where the
// `local_world` processes of the host all see them (torchrun without CUDA_VISIBLE_DEVICES), one
// GPU's worth at least; and at most an eighth of the host's `memory`, since registered pages
// cannot be reclaimed. One process reading four 4 GiB files into four GPUs on the x4 machine
// reached 111 GiB/s with 8 GiB registered, 138 with 32 (of 161 pinned; docs/performance.md).
uint64_t pagecache_dma_budget(uint64_t per_gpu, unsigned devices, unsigned local_world,
                              uint64_t memory);

// The largest piece of cached bytes a thread stages into GPU memory where the staging of
// `processes` processes (0: none known to share the host) shares the host's memory: `setting`
// (gpufile.shared_piece_kb, in bytes) where set, else the pieces in flight on the host (each
// process's `workers` x `slabs_per_worker`) kept within a third of the `last_level_cache`, a
// power of two of at least 256 KiB. A staged byte is written by the CPU and read by the copy
// engine; while it is still in the cache, that read costs host memory nothing. On four H200s
// (a 300 MiB cache, four processes of 12 workers x 2 slabs) a first read of a warm file ran at
// 65 GiB/s in 4 MiB pieces and 103 in 1 MiB ones (docs/performance.md, "Staged pieces that stay
// in the cache"). 0: no limit but the slab (`slab`): no process known to share the host, the
// cache size unknown, or a limit no smaller than the slab.
uint64_t shared_piece_bytes(uint64_t setting, uint64_t last_level_cache, unsigned processes,
                            unsigned workers, unsigned slabs_per_worker, uint64_t slab);

}  // namespace gpufile::exec
