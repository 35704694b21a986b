// cpu_share.h - how much CPU this process may really use, and which kernel
// it shares with other ranks. Busy-polling a wait only pays when every rank
// that polls has a CPU of its own: otherwise the spinner takes the CPU from
// the very peer (or the kernel's network processing) it is waiting for.
#pragma once

#include <string>

namespace hvd {

// CPUs this process may run on at once: the smallest of the machine's
// count, the affinity mask (taskset, cpusets) and the cgroup CPU quota
// (cgroup v2 cpu.max, v1 cfs_quota_us / cfs_period_us, rounded down, at
// least 1) - a container limited to 1.5 CPUs on a 64-core node has one.
unsigned usable_cpus();

// The CPU quota of the cgroup in `proc_self_cgroup` (a /proc/self/cgroup
// file) and its ancestors, in whole CPUs (at least 1), looked up under
// `cgroup_root` (normally /sys/fs/cgroup); 0: no quota. usable_cpus() uses
// it; tests give it a made-up tree.
unsigned cgroup_cpu_limit(const std::string& proc_self_cgroup, const std::string& cgroup_root);

// The running kernel's boot id: the same for every process on one machine,
// whatever network namespace, container or host name it has, different on
// any other machine. Empty where it cannot be read.
std::string machine_id();

}  // namespace hvd
