// response_cache.h - HOROVOD_CACHE_CAPACITY: the coordinator remembers the
// validated response for each recently seen tensor, keyed by its name and
// the exact request every rank sent. When a tensor comes back with the same
// requests (the steady state of a training loop) the coordinator reuses the
// response instead of cross-checking every rank's request field by field
// and building it again. Least recently used entries are evicted.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>

#include "engine/message.h"

namespace hvd {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}
  // The cached response for `name` if it was built for exactly `request`
  // (every field the coordinator validates), else nullptr.
  const Response* lookup(const std::string& name, const RequestMeta& request);
  void put(const std::string& name, const RequestMeta& request, const Response& response);
  size_t size() const { return entries_.size(); }
  // The autotuner turns the cache off and on; off, it is empty.
  void set_enabled(bool enabled);
  bool enabled() const { return enabled_ && capacity_ > 0; }
  uint64_t hits() const { return hits_; }

 private:
  struct Entry {
    RequestMeta request;
    Response response;
    std::list<std::string>::iterator lru_position;
  };
  size_t capacity_;
  bool enabled_ = true;
  std::list<std::string> lru_;  // front = most recently used
  std::unordered_map<std::string, Entry> entries_;
  uint64_t hits_ = 0;
};

}  // namespace hvd
