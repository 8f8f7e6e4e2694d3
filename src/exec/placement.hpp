// NUMA placement: where the IO workers run and where their staging memory lives, so that on a
// host with GPUs on several sockets each GPU's bytes cross neither the socket link on their way
// from the page cache to a slab nor on their way from the slab to the GPU.
//
// The facts come from sysfs: a GPU's PCI address (from the CUDA driver) names
// <sysfs>/bus/pci/devices/<address>/, whose numa_node and local_cpulist say which node the GPU
// hangs off and which CPUs are near it; <sysfs>/devices/system/node/online lists the nodes. The
// decision (plan_placement) is a pure function of those facts, table-tested in
// tests/unit/test_placement.cpp; the executor applies it (worker threads pinned with
// sched_setaffinity, slabs placed with mbind before their first touch, both through the OS seam).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpufile::exec {

// "0-3,8,10-11" (the kernel's cpulist / nodelist format) -> {0,1,2,3,8,10,11}, sorted and
// without repeats. False for anything else (the list is then left empty).
bool parse_cpu_list(std::string_view text, std::vector<int>* out);

// Where one GPU sits.
struct GpuSite {
  int gpu = -1;             // CUDA ordinal
  std::string pci;          // "dddd:bb:dd.f"
  int node = -1;            // NUMA node; -1 when sysfs does not say (no entry, or -1 there)
  std::vector<int> cpus;    // the CPUs near it (local_cpulist); empty when unknown
};

// Reads the GPU's node and CPUs under `sysfs_root` ("/sys" on a real machine). Whatever cannot
// be read stays unknown: a GPU without a sysfs entry (VMs, the CUDA driver's test double) is
// just a GPU without a place.
GpuSite read_gpu_site(const std::string& sysfs_root, int gpu, const std::string& pci);
// The NUMA nodes online (<sysfs>/devices/system/node/online); {0} when it cannot be read.
std::vector<int> online_nodes(const std::string& sysfs_root);

// One group of workers: pinned to `cpus` (empty: not pinned), staging preferred on `node` (-1:
// wherever the kernel puts it), serving first the GPUs of `gpus` (a bit per CUDA ordinal below
// 64; all bits: any GPU alike).
struct WorkerGroup {
  int node = -1;
  std::vector<int> cpus;
  uint64_t gpus = ~uint64_t{0};
  unsigned workers = 0;
};

struct Placement {
  std::vector<WorkerGroup> groups;  // their workers add up to the workers asked for
  std::string why;                  // one sentence for the log and `gpufile check`
};

// The GPUs this process serves: with one process per GPU (local world size > 1, as torchrun and
// mpirun start them, and at least as many GPUs as processes) the one its local rank names; else
// every GPU it sees. `local_rank` < 0: unknown.
std::vector<GpuSite> served_gpus(const std::vector<GpuSite>& all, unsigned local_world, int local_rank);

// Splits `workers` between the nodes of the served GPUs, in proportion to how many of them each
// node holds (each node at least one worker while there are enough), each group pinned to its
// GPUs' CPUs among `allowed` (the CPUs the process may use: a taskset, numactl or cpuset the
// application chose is kept; empty: no limit known). A group none of whose CPUs is allowed is
// not pinned. One group that serves every GPU alike, unpinned, when placement is off, the host
// has one node, no GPU's node is known, or there are no GPUs.
Placement plan_placement(const std::vector<GpuSite>& served, size_t nodes_online, unsigned workers,
                         bool enabled, const std::vector<int>& allowed = {});

// "node 0, CPUs 0-15" style text of a CPU list, ranges folded.
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace gpufile::exec
