#include "exec/placement.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>

#include "sys/os.hpp"

namespace gpufile::exec {
namespace {

// Largest CPU or node number accepted: far above any machine, low enough that a corrupt range
// cannot make a list of billions.
constexpr int kMaxCpu = 1 << 16;

bool parse_int(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && *out >= 0 && *out < kMaxCpu;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

}  // namespace

bool parse_cpu_list(std::string_view text, std::vector<int>* out) {
  out->clear();
  text = trim(text);
  std::vector<int> cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) return false;  // "1,"
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      if (!parse_int(item, &lo)) return false;
      hi = lo;
    } else if (!parse_int(item.substr(0, dash), &lo) || !parse_int(item.substr(dash + 1), &hi) ||
               hi < lo) {
      return false;
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  *out = std::move(cpus);
  return true;
}

GpuSite read_gpu_site(const std::string& sysfs_root, int gpu, const std::string& pci) {
  GpuSite site;
  site.gpu = gpu;
  site.pci = pci;
  const std::string dir = sysfs_root + "/bus/pci/devices/" + pci + "/";
  int node = -1;
  const std::string node_text(trim(sys::read_small_file(dir + "numa_node")));
  if (parse_int(node_text, &node)) site.node = node;  // "-1" (no node) fails parse_int: stays -1
  if (!parse_cpu_list(sys::read_small_file(dir + "local_cpulist"), &site.cpus)) site.cpus.clear();
  return site;
}

std::vector<int> online_nodes(const std::string& sysfs_root) {
  std::vector<int> nodes;
  if (!parse_cpu_list(sys::read_small_file(sysfs_root + "/devices/system/node/online"), &nodes) ||
      nodes.empty())
    nodes = {0};
  return nodes;
}

std::vector<GpuSite> served_gpus(const std::vector<GpuSite>& all, unsigned local_world, int local_rank) {
  if (local_world > 1 && local_rank >= 0 && static_cast<size_t>(local_rank) < all.size() &&
      all.size() >= local_world)
    return {all[static_cast<size_t>(local_rank)]};
  return all;
}

Placement plan_placement(const std::vector<GpuSite>& served, size_t nodes_online, unsigned workers,
                         bool enabled, const std::vector<int>& allowed) {
  Placement p;
  auto unplaced = [&](std::string why) {
    p.groups = {WorkerGroup{-1, {}, ~uint64_t{0}, workers}};
    p.why = std::move(why);
    return p;
  };
  if (!enabled) return unplaced("off (gpufile.numa_placement)");
  if (nodes_online <= 1) return unplaced("one NUMA node: nothing to place");
  if (served.empty()) return unplaced("no GPU");
  // Nodes in order, each with its GPUs and their CPUs. GPUs of unknown place go to no group:
  // every worker takes their IO (the groups' preference is only a preference).
  std::map<int, WorkerGroup> by_node;
  std::map<int, unsigned> gpus_on;
  for (const GpuSite& g : served) {
    if (g.node < 0 || g.cpus.empty()) continue;
    WorkerGroup& w = by_node[g.node];
    w.node = g.node;
    if (w.gpus == ~uint64_t{0}) w.gpus = 0;
    if (g.gpu >= 0 && g.gpu < 64) w.gpus |= uint64_t{1} << g.gpu;
    w.cpus.insert(w.cpus.end(), g.cpus.begin(), g.cpus.end());
    ++gpus_on[g.node];
  }
  if (by_node.empty()) return unplaced("the GPUs' NUMA nodes are unknown (no sysfs entry)");
  unsigned placed_gpus = 0;
  for (auto& [node, n] : gpus_on) placed_gpus += n;
  // Proportional shares, rounded down, then the rest one by one to the nodes in order; a node
  // with GPUs gets at least one worker while there are as many workers as nodes.
  unsigned given = 0;
  for (auto& [node, w] : by_node) {
    w.workers = std::max(workers >= by_node.size() ? 1u : 0u, workers * gpus_on[node] / placed_gpus);
    given += w.workers;
    std::sort(w.cpus.begin(), w.cpus.end());
    w.cpus.erase(std::unique(w.cpus.begin(), w.cpus.end()), w.cpus.end());
    if (!allowed.empty()) {
      std::vector<int> both;
      std::set_intersection(w.cpus.begin(), w.cpus.end(), allowed.begin(), allowed.end(),
                            std::back_inserter(both));
      w.cpus = std::move(both);
    }
  }
  for (auto it = by_node.begin(); given < workers; ++given) {
    ++it->second.workers;
    if (++it == by_node.end()) it = by_node.begin();
  }
  // Rounding up to one each may have given more than there are: take back from the largest.
  while (given > workers) {
    auto largest = std::max_element(by_node.begin(), by_node.end(), [](const auto& a, const auto& b) {
      return a.second.workers < b.second.workers;
    });
    --largest->second.workers;
    --given;
  }
  std::string why = std::to_string(placed_gpus) + " GPU(s) on " + std::to_string(by_node.size()) +
                    " of " + std::to_string(nodes_online) + " NUMA nodes:";
  for (auto& [node, w] : by_node) {
    if (w.workers == 0) continue;
    why += " node " + std::to_string(node) + " " + std::to_string(w.workers) + " worker(s) " +
           (w.cpus.empty() ? std::string("unpinned (none of its CPUs is allowed)")
                           : "on CPUs " + cpu_list_text(w.cpus)) + ";";
    p.groups.push_back(std::move(w));
  }
  why.pop_back();
  p.why = std::move(why);
  return p;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

}  // namespace gpufile::exec
