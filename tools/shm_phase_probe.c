/*
 * shm_phase_probe.c - how fast two processes on this machine move data
 * through shared memory right now, without hvd: the shape of a 256 KiB
 * float32 allreduce at P=2 (each process copies half its input into a shared
 * slot, waits for the other, sums its half from the other's slot into a
 * shared result, waits, and copies the other's half of the result back).
 *
 * On the 2-CPU VMs this project is measured on, the same program takes
 * about 40-55 us per round in some minutes and 135-185 us in others (the
 * host placing the two virtual CPUs near or far apart); hvd's and Open
 * MPI's timings move with it. Run it before and after a benchmark to tell
 * which phase the benchmark ran in (docs/benchmarks.md, "Fast and slow
 * phases of the machine"). The second line it prints times each of the
 * round's copies, and a copy of the same bytes inside one process.
 *
 *   cc -O2 tools/shm_phase_probe.c -o /tmp/shm_phase_probe && /tmp/shm_phase_probe [rounds]
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kFloats = 65536, kHalf = kFloats / 2 };

struct shared {
  _Atomic long arrived[2] __attribute__((aligned(64)));
  float slot[2][kFloats] __attribute__((aligned(64)));   /* slot[member]: the other member's half */
  float result[kFloats] __attribute__((aligned(64)));
};

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Both members call it once per barrier; spins (the members have a CPU each). */
static void barrier(struct shared* s, int me, long* count) {
  ++*count;
  atomic_store(&s->arrived[me], *count);
  while (atomic_load(&s->arrived[1 - me]) < *count) {
  }
}

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 2000;
  struct shared* s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(s, 0, sizeof *s);
  const pid_t child = fork();
  const int me = child == 0;
  float* data = malloc(sizeof(float) * kFloats);
  for (int i = 0; i < kFloats; ++i) data[i] = 1.0f;
  const int mine = me * kHalf, other = (1 - me) * kHalf; /* where each member's half starts */
  long count = 0;
  double loops[5], phases[3][5];  /* per loop: the round, and its three copies' share of it */
  for (int loop = 0; loop < 5; ++loop) {
    const double start = seconds_now();
    double in = 0, sum = 0, out = 0;
    for (int r = 0; r < rounds; ++r) {
      const double t0 = seconds_now();
      memcpy(s->slot[me], data + other, sizeof(float) * kHalf);
      const double t1 = seconds_now();
      barrier(s, me, &count);
      const double t2 = seconds_now();
      const float* theirs = s->slot[1 - me];
      for (int i = 0; i < kHalf; ++i) s->result[mine + i] = data[mine + i] + theirs[i] * 0.0f;
      const double t3 = seconds_now();
      barrier(s, me, &count);
      const double t4 = seconds_now();
      memcpy(data + other, s->result + other, sizeof(float) * kHalf);
      in += t1 - t0;
      sum += t3 - t2;
      out += seconds_now() - t4;
    }
    loops[loop] = (seconds_now() - start) / rounds;
    phases[0][loop] = in / rounds;
    phases[1][loop] = sum / rounds;
    phases[2][loop] = out / rounds;
  }
  if (me == 1) return 0;
  waitpid(child, NULL, 0);
  qsort(loops, 5, sizeof loops[0], compare);
  for (int p = 0; p < 3; ++p) qsort(phases[p], 5, sizeof phases[p][0], compare);
  /* The same 128 KiB copied between two buffers of this process alone: what
     the copies cost when no other CPU holds the lines. */
  float* a = malloc(sizeof(float) * kHalf);
  float* b = malloc(sizeof(float) * kHalf);
  memset(a, 0, sizeof(float) * kHalf);
  memset(b, 0, sizeof(float) * kHalf);
  double private_copies[5];
  for (int loop = 0; loop < 5; ++loop) {
    const double start = seconds_now();
    for (int r = 0; r < rounds; ++r) {
      memcpy(r % 2 ? a : b, r % 2 ? b : a, sizeof(float) * kHalf);
      __asm__ volatile("" ::: "memory");
    }
    private_copies[loop] = (seconds_now() - start) / rounds;
  }
  qsort(private_copies, 5, sizeof private_copies[0], compare);
  printf("256 KiB through shared memory, 2 processes: %.1f us per round (median of 5 loops of %d)\n",
         loops[2] * 1e6, rounds);
  /* Each phase moves 128 KiB: into lines the other CPU read last round, then
     out of lines it wrote (into lines it read), then out of lines it wrote. */
  printf("  copy into the slot %.1f us, sum from the other's slot %.1f us, copy out of the result %.1f us;"
         " 128 KiB copied within this process: %.1f us\n",
         phases[0][2] * 1e6, phases[1][2] * 1e6, phases[2][2] * 1e6, private_copies[2] * 1e6);
  return 0;
}
