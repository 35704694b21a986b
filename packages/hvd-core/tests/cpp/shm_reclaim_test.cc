// shm_reclaim_test.cc - arenas left in /dev/shm by a job whose member 0 was
// killed before every member attached are removed by the next job's member
// 0, and arenas of live jobs are left alone.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>

#include "auth/hmac_sha256.h"
#include "rendezvous/store.h"
#include "test_harness.h"
#include "transport/shm/shm_communicator.h"

using namespace hvd;

namespace {

// The /dev/shm path ShmCommunicator gives the arena for `key`.
std::string arena_path(const std::string& key) {
  return "/dev/shm/hvd-" + to_hex(sha256(key.data(), key.size())).substr(0, 40);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Forks a process that creates the arena as member 0 of 2 (member 1 never
// comes, so the name stays) and then either dies at once without cleaning up,
// as under SIGKILL, or waits until it is killed. Returns its pid once the
// arena is complete (its creator recorded in it).
pid_t create_arena_in_child(const std::string& key, bool stay_alive) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    MemoryStore store;
    CommOptions options;
    options.key = key;
    options.rank = 0;
    options.global_ranks = {0, 1};
    try {
      new ShmCommunicator(options, store);  // never destroyed: no cleanup
    } catch (const std::exception& e) {
      fprintf(stderr, "child could not create the arena: %s\n", e.what());
      _exit(1);
    }
    char done = 1;
    if (write(ready[1], &done, 1) != 1) _exit(1);
    if (stay_alive) pause();
    _exit(0);
  }
  close(ready[1]);
  char done = 0;
  if (read(ready[0], &done, 1) != 1) done = 0;
  close(ready[0]);
  return pid;
}

}  // namespace

// Kills and reaps the child on every way out of the test.
struct ChildProcess {
  pid_t pid;
  ~ChildProcess() {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
};

HVD_TEST(arena_of_a_job_whose_member_0_died_is_reclaimed_and_live_ones_are_kept) {
  const std::string dead_key = "reclaim-test-dead-" + std::to_string(getpid());
  const std::string live_key = "reclaim-test-live-" + std::to_string(getpid());
  int status = 0;
  waitpid(create_arena_in_child(dead_key, false), &status, 0);  // it exits by itself
  EXPECT_TRUE(exists(arena_path(dead_key)));  // left behind

  // The next job's member 0 removes it before creating its own arena.
  ChildProcess live{create_arena_in_child(live_key, true)};
  EXPECT_TRUE(exists(arena_path(live_key)));
  EXPECT_TRUE(!exists(arena_path(dead_key)));

  // An arena whose creator still runs is never taken.
  reclaim_stale_arenas();
  EXPECT_TRUE(exists(arena_path(live_key)));

  kill(live.pid, SIGKILL);
  waitpid(live.pid, &status, 0);
  EXPECT_TRUE(reclaim_stale_arenas() >= 1);
  EXPECT_TRUE(!exists(arena_path(live_key)));
}

// Member 0 killed after creating the arena but before announcing it: member
// 1, whose wait for the announcement fails, removes the name itself, so the
// job leaves nothing in /dev/shm even when no later job runs. (The wait
// lasts at least 10 s, see the constructor.)
HVD_TEST(member_whose_wait_for_a_dead_member_0_fails_removes_the_arena) {
  const std::string key = "reclaim-test-unannounced-" + std::to_string(getpid());
  int status = 0;
  // The child's store is its own: the announcement never reaches this one.
  waitpid(create_arena_in_child(key, false), &status, 0);
  EXPECT_TRUE(exists(arena_path(key)));

  MemoryStore store;
  CommOptions options;
  options.key = key;
  options.rank = 1;
  options.global_ranks = {0, 1};
  options.timeout_seconds = 1.0;
  bool failed = false;
  try {
    ShmCommunicator member(options, store);
  } catch (const std::exception&) {
    failed = true;
  }
  EXPECT_TRUE(failed);
  EXPECT_TRUE(!exists(arena_path(key)));
}
