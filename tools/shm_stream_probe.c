/*
 * shm_stream_probe.c - how fast one process streams bytes to another through
 * a ring in shared memory, without hvd: the pattern of hvd's streamed lane
 * broadcast (docs/core.md, "The fast lane"). The writer copies `bytes` from
 * its private buffer into the ring in `chunk`-sized pieces and counts them;
 * the reader copies each piece out into its own buffer as soon as it is
 * counted; the writer reuses a piece of the ring only after the reader has
 * copied it out. Each pass goes on in the ring where the last one stopped,
 * and the writer waits for the reader at the end of every pass. It prints
 * the median time of a pass over five loops.
 *
 *   cc -O2 tools/shm_stream_probe.c -o /tmp/shm_stream_probe
 *   /tmp/shm_stream_probe [bytes [chunk [ring [passes [memcpy|vector]]]]]
 *   (defaults: 1048576 65536 1048576 1000 memcpy)
 *
 * "vector" copies with 16-byte SSE2 loads and stores instead of memcpy
 * (which glibc does with `rep movsb` from 2 KiB to the L2 size on AMD).
 * On the 2-CPU AMD EPYC VM of docs/benchmarks.md a 1 MiB pass took 35-45 us
 * in some minutes and 230-450 us in others, while shm_phase_probe read the
 * same in both: run it before and after a benchmark of large shared-memory
 * collectives to know which of the two it ran in.
 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct counters {
  _Atomic uint64_t written __attribute__((aligned(64)));
  _Atomic uint64_t consumed __attribute__((aligned(64)));
  _Atomic uint64_t passes_read __attribute__((aligned(64)));
};

static int use_vector;

static void copy(unsigned char *dst, const unsigned char *src, size_t n) {
  if (!use_vector) {
    memcpy(dst, src, n);
    return;
  }
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
    _mm_storeu_si128((__m128i *)(dst + i), a);
    _mm_storeu_si128((__m128i *)(dst + i + 16), b);
    _mm_storeu_si128((__m128i *)(dst + i + 32), c);
    _mm_storeu_si128((__m128i *)(dst + i + 48), d);
  }
  memcpy(dst + i, src + i, n - i);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoul(argv[1], NULL, 0) : 1 << 20;
  size_t chunk = argc > 2 ? strtoul(argv[2], NULL, 0) : 64 << 10;
  size_t ring_bytes = argc > 3 ? strtoul(argv[3], NULL, 0) : 1 << 20;
  long passes = argc > 4 ? atol(argv[4]) : 1000;
  use_vector = argc > 5 && strcmp(argv[5], "vector") == 0;
  if (bytes == 0 || chunk == 0 || ring_bytes < chunk || passes <= 0) {
    fprintf(stderr, "usage: %s [bytes [chunk [ring [passes [memcpy|vector]]]]] (ring >= chunk > 0)\n", argv[0]);
    return 2;
  }
  struct counters *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  unsigned char *ring = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  unsigned char *buffer = malloc(bytes);
  if (c == MAP_FAILED || ring == MAP_FAILED || buffer == NULL) {
    perror("allocation");
    return 1;
  }
  memset(buffer, 1, bytes);
  const uint64_t ring_chunks = ring_bytes / chunk, chunks = (bytes + chunk - 1) / chunk;
  const int loops = 5;
  const long warmup = passes / 10 + 1;
  pid_t reader = fork();
  uint64_t base = 0;
  double times[5];
  for (int loop = 0; loop < loops; ++loop) {
    double start = 0;
    for (long pass = 0; pass < warmup + passes; ++pass) {
      if (pass == warmup) start = now();
      for (uint64_t j = 0; j < chunks; ++j) {
        const uint64_t g = base + j;
        const size_t n = j + 1 == chunks ? bytes - j * chunk : chunk;
        unsigned char *at = ring + (g % ring_chunks) * chunk;
        if (reader != 0) {
          while (g >= ring_chunks && atomic_load_explicit(&c->consumed, memory_order_acquire) + ring_chunks <= g) {
            __builtin_ia32_pause();
          }
          copy(at, buffer + j * chunk, n);
          atomic_store_explicit(&c->written, g + 1, memory_order_release);
        } else {
          while (atomic_load_explicit(&c->written, memory_order_acquire) <= g) __builtin_ia32_pause();
          copy(buffer + j * chunk, at, n);
          atomic_store_explicit(&c->consumed, g + 1, memory_order_release);
        }
      }
      base += chunks;
      const uint64_t done = (uint64_t)loop * (warmup + passes) + pass + 1;
      if (reader == 0) {
        atomic_store_explicit(&c->passes_read, done, memory_order_release);
      } else {
        while (atomic_load_explicit(&c->passes_read, memory_order_acquire) != done) __builtin_ia32_pause();
      }
    }
    times[loop] = (now() - start) / passes * 1e6;
  }
  if (reader == 0) return 0;
  waitpid(reader, NULL, 0);
  qsort(times, loops, sizeof times[0], by_value);
  printf("%zu bytes in %zu-byte chunks through a %zu-byte ring (%s): %.1f us per pass (median of %d loops of %ld)\n",
         bytes, chunk, ring_bytes, use_vector ? "vector" : "memcpy", times[loops / 2], loops, passes);
  return 0;
}
