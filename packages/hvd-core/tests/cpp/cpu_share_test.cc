// cpu_share_test.cc - the CPU budget that decides whether waits busy-poll:
// cgroup v1 and v2 quotas on made-up cgroup trees (the tightest quota on
// the path to the root counts), the affinity mask, and the machine id.
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/cpu_share.h"
#include "test_harness.h"

using namespace hvd;

namespace {

// A scratch directory holding a /proc/self/cgroup file and a cgroup tree.
struct FakeCgroups {
  std::string root;
  FakeCgroups() {
    char tmpl[] = "/tmp/hvd-cgroups-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~FakeCgroups() { std::system(("rm -rf " + root).c_str()); }
  void write(const std::string& relative, const std::string& text) const {
    std::string path = root + "/" + relative;
    std::system(("mkdir -p " + path.substr(0, path.rfind('/'))).c_str());
    std::ofstream(path) << text;
  }
  unsigned limit() const { return cgroup_cpu_limit(root + "/proc_self_cgroup", root + "/sys"); }
};

}  // namespace

HVD_TEST(cgroup_v2_quota_is_the_tightest_on_the_path_to_the_root) {
  FakeCgroups fs;
  fs.write("proc_self_cgroup", "0::/jobs/rank0\n");
  EXPECT_EQ(fs.limit(), 0u);  // no cpu.max anywhere: no quota
  fs.write("sys/jobs/rank0/cpu.max", "max 100000\n");
  EXPECT_EQ(fs.limit(), 0u);  // "max": unlimited
  fs.write("sys/jobs/cpu.max", "350000 100000\n");
  EXPECT_EQ(fs.limit(), 3u);  // the parent's 3.5 CPUs bind the child, rounded down
  fs.write("sys/jobs/rank0/cpu.max", "150000 100000\n");
  EXPECT_EQ(fs.limit(), 1u);
  fs.write("sys/jobs/rank0/cpu.max", "20000 100000\n");
  EXPECT_EQ(fs.limit(), 1u);  // a fraction of a CPU still runs: never 0
}

HVD_TEST(cgroup_v1_quota_is_read_from_the_cpu_controller) {
  FakeCgroups fs;
  fs.write("proc_self_cgroup", "4:memory:/other\n2:cpu,cpuacct:/docker/abc\n0::/\n");
  fs.write("sys/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  fs.write("sys/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(fs.limit(), 0u);  // -1: unlimited
  fs.write("sys/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n");
  EXPECT_EQ(fs.limit(), 2u);
  // A container sees its own cgroup as the mount's root, whatever path /proc shows.
  FakeCgroups inside;
  inside.write("proc_self_cgroup", "3:cpu:/docker/abc\n");
  inside.write("sys/cpu/cpu.cfs_quota_us", "100000\n");
  inside.write("sys/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(inside.limit(), 1u);
}

HVD_TEST(usable_cpus_follow_the_affinity_mask) {
  cpu_set_t saved;
  CPU_ZERO(&saved);
  EXPECT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const unsigned all = usable_cpus();
  EXPECT_TRUE(all >= 1 && all <= static_cast<unsigned>(CPU_COUNT(&saved)));
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  EXPECT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(usable_cpus(), 1u);
  EXPECT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(usable_cpus(), all);
}

HVD_TEST(machine_id_is_the_kernels_boot_id) {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(in, boot_id);
  EXPECT_TRUE(!boot_id.empty());
  EXPECT_EQ(machine_id(), boot_id);
}
