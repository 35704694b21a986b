// shm_copy.h - the copy the shared-memory transport moves bytes with.
#pragma once

#include <cstddef>

namespace hvd {

// memcpy for copies into and out of the shared-memory arena. From 2 KiB up
// to the L2 size glibc's memcpy uses `rep movsb` on AMD processors, which on
// the AMD EPYC (Zen 4) VM the benchmarks run on was several times slower
// than plain vector loads and stores for the arena's copies between
// processes: a 1 MiB broadcast's copy into the arena took 87 us instead of
// 33 us (docs/benchmarks.md, "Broadcasts and allgathers streamed through the
// lane"; in the VM's slow minutes, when its two CPUs are far apart, memcpy
// was as fast or faster, but every copy between the CPUs is slow then). So
// from 2 KiB this copies with 32-byte (AVX2, when the CPU has it)
// or 16-byte vectors, stores aligned; below, and off x86-64, it is memcpy.
// HVD_SHM_COPY=memcpy (read once) makes it memcpy throughout, for
// measurements.
void shm_copy(void* dst, const void* src, size_t bytes);

// The same with non-temporal (streaming) stores from 2 KiB on x86-64: the
// copy goes to memory, not into this CPU's cache, for data another process
// reads next (see ShmCommunicator's kStreamSizeClasses). Not affected by
// HVD_SHM_COPY.
void shm_stream_copy(void* dst, const void* src, size_t bytes);

}  // namespace hvd
