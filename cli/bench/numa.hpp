// -n and the job file's numa_node: running IO threads on the CPUs of one NUMA node, as gdsio's
// -n places a job's threads. Only the threads are placed: their buffers are set up before
// the threads start, wherever the allocator and the CUDA driver put them.
#pragma once

#include <sched.h>

#include <string>

namespace gpufile::cli::benchmark {

// "0-3,8-11" (the kernel's cpulist format) as a CPU set; false on anything else.
bool parse_cpu_list(const std::string& text, cpu_set_t* out);

// The CPUs of NUMA node `node`, from /sys/devices/system/node. A machine that shows no NUMA
// nodes at all has one node, 0, with every CPU. False with the reason.
bool numa_node_cpus(int node, cpu_set_t* out, std::string* why);

// Runs the calling thread on `cpus` only; false when the kernel refuses.
bool pin_thread(const cpu_set_t& cpus);

}  // namespace gpufile::cli::benchmark
