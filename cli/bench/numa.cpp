#include "cli/bench/numa.hpp"

#include <pthread.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpufile::cli::benchmark {
namespace {

constexpr const char* kNodes = "/sys/devices/system/node";

bool parse_cpu(const std::string& text, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno || text.empty() || *end != '\0' || v < 0 || v >= CPU_SETSIZE) return false;
  *out = v;
  return true;
}

// "3" or "0-7" into `out`.
bool add_cpu_range(const std::string& item, cpu_set_t* out) {
  const size_t dash = item.find('-');
  long first = 0, last = 0;
  if (!parse_cpu(item.substr(0, dash), &first)) return false;
  last = first;
  if (dash != std::string::npos && !parse_cpu(item.substr(dash + 1), &last)) return false;
  if (last < first) return false;
  for (long cpu = first; cpu <= last; ++cpu) CPU_SET(cpu, out);
  return true;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

bool parse_cpu_list(const std::string& text, cpu_set_t* out) {
  CPU_ZERO(out);
  std::string list = text;
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.pop_back();
  if (list.empty()) return false;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');)
    if (!add_cpu_range(item, out)) return false;
  return CPU_COUNT(out) > 0;
}

bool numa_node_cpus(int node, cpu_set_t* out, std::string* why) {
  if (!exists(kNodes) && node == 0) {  // no NUMA in this kernel: one node, every CPU
    CPU_ZERO(out);
    if (sched_getaffinity(0, sizeof *out, out) == 0) return true;
    *why = std::string("sched_getaffinity: ") + std::strerror(errno);
    return false;
  }
  const std::string path = std::string(kNodes) + "/node" + std::to_string(node) + "/cpulist";
  std::ifstream in(path);
  std::string list;
  if (!in || !std::getline(in, list)) {
    *why = "no NUMA node " + std::to_string(node) + " on this machine (" + path + ")";
    return false;
  }
  if (parse_cpu_list(list, out)) return true;
  *why = "NUMA node " + std::to_string(node) + " has no CPUs (" + path + ": '" + list + "')";
  return false;
}

bool pin_thread(const cpu_set_t& cpus) {
  return pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus) == 0;
}

}  // namespace gpufile::cli::benchmark
