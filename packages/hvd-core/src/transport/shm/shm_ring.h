// shm_ring.h - two single-writer, single-reader byte rings (one each way) in
// a shared-memory segment, carrying a control channel between two processes
// on one host. Passing a message costs a few cache-line transfers instead of
// two system calls and the loopback TCP stack. The channel's TCP connection
// stays open beside it: it tells a reader that its peer died (end of file)
// and wakes a reader that sleeps in poll() (a "doorbell" byte).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace hvd {

struct ShmRingHeader;

class ShmRing {
 public:
  // The creator is side 0, the attaching process side 1; each writes to its
  // own ring and reads the other's. create() throws Error(kInternal).
  static std::unique_ptr<ShmRing> create(const std::string& name, size_t capacity, const std::string& nonce);
  // nullptr when the segment cannot be opened or is not the one offered (a
  // different host that shares the host name, another user's segment):
  // `why` says what went wrong.
  static std::unique_ptr<ShmRing> attach(const std::string& name, const std::string& nonce, std::string* why);
  // Removes the name; mappings stay valid. Done once both sides have it.
  static void unlink(const std::string& name);
  // "/hvd-r" + 40 hex digits of a hash of `key` (unguessable: the key
  // embeds secret-derived material).
  static std::string name_for(const std::string& key);
  ~ShmRing();

  // Writer: copies as much of data[0, size) as fits; returns how much.
  size_t write(const char* data, size_t size);
  // Writer, after write(): whether the reader went to sleep and must be
  // woken through the socket. At most one caller sees true per sleep.
  bool reader_needs_doorbell();

  // Reader: appends every byte written so far to `out`; returns how many.
  size_t read_into(std::string* out);
  // Reader, before sleeping in poll(): announces the sleep. Returns false
  // (do not sleep) when bytes have arrived meanwhile.
  bool prepare_to_sleep();
  void awake();

 private:
  ShmRing(void* memory, size_t bytes, int side);
  ShmRingHeader* header_;
  size_t bytes_;
  size_t capacity_;
  int side_;
  unsigned char* out_data_;
  unsigned char* in_data_;
};

}  // namespace hvd
