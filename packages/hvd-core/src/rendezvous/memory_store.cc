// memory_store.cc - the in-process Store used by C++ tests that run every
// rank as a thread.
#include <chrono>

#include "common/error.h"
#include "rendezvous/store.h"

namespace hvd {

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::string MemoryStore::get(const std::string& key, double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_seconds));
  bool found = cv_.wait_until(lock, deadline, [&] { return data_.count(key) != 0; });
  if (!found) {
    throw_error(ErrorCode::kInternal, "rendezvous store: key '" + key + "' did not appear within " +
                                          std::to_string(timeout_seconds) + " s");
  }
  return data_[key];
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    value = (it == data_.end() ? 0 : std::stoll(it->second)) + delta;
    data_[key] = std::to_string(value);
  }
  cv_.notify_all();
  return value;
}

}  // namespace hvd
