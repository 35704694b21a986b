// cpu_share.cc - see cpu_share.h.
#include "common/cpu_share.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace hvd {
namespace {

// The cgroup path `proc_self_cgroup` gives for the controller list
// `wanted` ("" is cgroup v2's unified hierarchy).
std::string cgroup_path(const std::string& proc_self_cgroup, const std::string& wanted) {
  std::ifstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controller,list:/path"
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::stringstream list(controllers);
    std::string c;
    bool match = controllers == wanted;
    while (!match && !wanted.empty() && std::getline(list, c, ',')) match = c == wanted;
    if (match) return line.substr(second + 1);
  }
  return "";
}

// CPUs a quota of `quota` per `period` allows, 0 when unlimited/unknown.
unsigned quota_cpus(double quota, double period) {
  if (!(quota > 0) || !(period > 0)) return 0;
  return std::max(1u, static_cast<unsigned>(quota / period));
}

}  // namespace

// The tightest quota on the way from the cgroup up to the root (a parent's
// limit binds its children too; in a container the path /proc shows may be
// the host's while the container's own cgroup is mounted as the root).
unsigned cgroup_cpu_limit(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  unsigned best = 0;
  auto walk_up = [&best](std::string path, const std::function<unsigned(const std::string&)>& limit_at) {
    while (!path.empty()) {
      const unsigned cpus = limit_at(path == "/" ? "" : path);
      if (cpus > 0) best = best == 0 ? cpus : std::min(best, cpus);
      if (path == "/") break;
      path = path.substr(0, std::max<size_t>(1, path.rfind('/')));
    }
  };
  // cgroup v2: "max 100000" or "150000 100000" in cpu.max.
  walk_up(cgroup_path(proc_self_cgroup, ""), [&](const std::string& dir) {
    std::ifstream in(cgroup_root + dir + "/cpu.max");
    std::string quota;
    double period = 0;
    return in >> quota >> period && quota != "max" ? quota_cpus(std::atof(quota.c_str()), period) : 0u;
  });
  // cgroup v1: cpu.cfs_quota_us is -1 when unlimited.
  for (const std::string mount : {"/cpu", "/cpu,cpuacct"}) {
    walk_up(cgroup_path(proc_self_cgroup, "cpu"), [&](const std::string& dir) {
      std::ifstream q(cgroup_root + mount + dir + "/cpu.cfs_quota_us");
      std::ifstream p(cgroup_root + mount + dir + "/cpu.cfs_period_us");
      double quota = 0, period = 0;
      return q >> quota && p >> period ? quota_cpus(quota, period) : 0u;
    });
  }
  return best;
}

unsigned usable_cpus() {
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cpus = std::min(cpus, static_cast<unsigned>(std::max(1, CPU_COUNT(&set))));
  }
  unsigned quota = cgroup_cpu_limit("/proc/self/cgroup", "/sys/fs/cgroup");
  return quota > 0 ? std::min(cpus, quota) : cpus;
}

std::string machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace hvd
