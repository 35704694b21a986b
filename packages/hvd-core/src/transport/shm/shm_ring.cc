// shm_ring.cc - see shm_ring.h. Each direction has a `written` and a `read`
// byte count (only ever growing, so wrap-around needs no flag) and the
// reader's `sleeping` word. Sleeping uses the store-fence-load pattern on
// both sides: the reader sets `sleeping` and then looks for bytes; the
// writer publishes bytes and then looks at `sleeping`. At least one of them
// sees the other's store, so a reader never sleeps through a message.
#include "transport/shm/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "auth/hmac_sha256.h"
#include "common/error.h"

namespace hvd {
namespace {

constexpr uint64_t kRingMagic = 0x68766452696e6731ull;  // "hvdRing1"
constexpr size_t kNonceBytes = 64;

struct alignas(64) Counter {
  std::atomic<uint64_t> value{0};
};

struct RingDirection {
  Counter written;   // by the writer
  Counter read;      // by the reader
  Counter sleeping;  // by the reader (1 = asleep in poll), cleared by the writer's doorbell
};

size_t data_offset() { return 4096; }

}  // namespace

struct ShmRingHeader {
  uint64_t magic;
  uint64_t capacity;
  char nonce[kNonceBytes];
  RingDirection direction[2];  // [s]: written by side s
};
static_assert(sizeof(ShmRingHeader) <= 4096, "ring header must fit its page");

std::string ShmRing::name_for(const std::string& key) {
  return "/hvd-r" + to_hex(sha256(key.data(), key.size())).substr(0, 40);
}

void ShmRing::unlink(const std::string& name) { shm_unlink(name.c_str()); }

std::unique_ptr<ShmRing> ShmRing::create(const std::string& name, size_t capacity, const std::string& nonce) {
  if (nonce.size() > kNonceBytes || capacity == 0 || (capacity & (capacity - 1)) != 0) {
    throw_error(ErrorCode::kInternal, "shm ring: bad nonce or capacity");
  }
  const size_t bytes = data_offset() + 2 * capacity;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left by a killed run with the same key: its name is ours to reuse.
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) throw_error(ErrorCode::kInternal, std::string("shm ring: cannot create: ") + std::strerror(errno));
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err == EOPNOTSUPP || err == EINVAL) err = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  void* mem = err == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0) : MAP_FAILED;
  if (err == 0 && mem == MAP_FAILED) err = errno;
  ::close(fd);
  if (err != 0) {
    shm_unlink(name.c_str());
    throw_error(ErrorCode::kInternal, std::string("shm ring: cannot size or map: ") + std::strerror(err));
  }
  auto* header = new (mem) ShmRingHeader();
  header->magic = kRingMagic;
  header->capacity = capacity;
  std::memset(header->nonce, 0, kNonceBytes);
  std::memcpy(header->nonce, nonce.data(), nonce.size());
  return std::unique_ptr<ShmRing>(new ShmRing(mem, bytes, 0));
}

std::unique_ptr<ShmRing> ShmRing::attach(const std::string& name, const std::string& nonce, std::string* why) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    *why = std::string("cannot open ") + name + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || static_cast<size_t>(st.st_size) < data_offset()) {
    ::close(fd);
    *why = name + " is not a ring of this user";
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) {
    *why = std::string("cannot map ") + name + ": " + std::strerror(errno);
    return nullptr;
  }
  const auto* header = static_cast<const ShmRingHeader*>(mem);
  char expected[kNonceBytes] = {0};
  std::memcpy(expected, nonce.data(), std::min(nonce.size(), kNonceBytes));
  if (header->magic != kRingMagic || header->capacity == 0 || data_offset() + 2 * header->capacity != bytes ||
      nonce.size() > kNonceBytes || std::memcmp(header->nonce, expected, kNonceBytes) != 0) {
    munmap(mem, bytes);
    *why = name + " is not the ring that was offered";
    return nullptr;
  }
  return std::unique_ptr<ShmRing>(new ShmRing(mem, bytes, 1));
}

ShmRing::ShmRing(void* memory, size_t bytes, int side)
    : header_(static_cast<ShmRingHeader*>(memory)), bytes_(bytes), capacity_(header_->capacity), side_(side) {
  auto* base = static_cast<unsigned char*>(memory) + data_offset();
  out_data_ = base + static_cast<size_t>(side) * capacity_;
  in_data_ = base + static_cast<size_t>(1 - side) * capacity_;
}

ShmRing::~ShmRing() { munmap(header_, bytes_); }

size_t ShmRing::write(const char* data, size_t size) {
  RingDirection& d = header_->direction[side_];
  const uint64_t written = d.written.value.load(std::memory_order_relaxed);
  const uint64_t read = d.read.value.load(std::memory_order_acquire);
  const size_t n = std::min(size, capacity_ - static_cast<size_t>(written - read));
  const size_t at = static_cast<size_t>(written) & (capacity_ - 1);
  const size_t first = std::min(n, capacity_ - at);
  std::memcpy(out_data_ + at, data, first);
  std::memcpy(out_data_, data + first, n - first);
  if (n) d.written.value.store(written + n, std::memory_order_release);
  return n;
}

bool ShmRing::reader_needs_doorbell() {
  RingDirection& d = header_->direction[side_];
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d.sleeping.value.load(std::memory_order_relaxed) == 0) return false;
  return d.sleeping.value.exchange(0) != 0;
}

size_t ShmRing::read_into(std::string* out) {
  RingDirection& d = header_->direction[1 - side_];
  const uint64_t read = d.read.value.load(std::memory_order_relaxed);
  const uint64_t written = d.written.value.load(std::memory_order_acquire);
  const size_t n = static_cast<size_t>(written - read);
  if (n == 0) return 0;
  if (n > capacity_) throw_error(ErrorCode::kInternal, "shm ring: corrupt counters");
  const size_t at = static_cast<size_t>(read) & (capacity_ - 1);
  const size_t first = std::min(n, capacity_ - at);
  out->append(reinterpret_cast<const char*>(in_data_ + at), first);
  out->append(reinterpret_cast<const char*>(in_data_), n - first);
  d.read.value.store(written, std::memory_order_release);
  return n;
}

bool ShmRing::prepare_to_sleep() {
  RingDirection& d = header_->direction[1 - side_];
  d.sleeping.value.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d.written.value.load(std::memory_order_relaxed) != d.read.value.load(std::memory_order_relaxed)) {
    d.sleeping.value.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ShmRing::awake() { header_->direction[1 - side_].sleeping.value.store(0, std::memory_order_relaxed); }

}  // namespace hvd
