// response_cache.cc - LRU of validated responses (see response_cache.h).
#include "engine/response_cache.h"

namespace hvd {

void ResponseCache::set_enabled(bool enabled) {
  enabled_ = enabled;
  if (!enabled) {
    entries_.clear();
    lru_.clear();
  }
}

const Response* ResponseCache::lookup(const std::string& name, const RequestMeta& request) {
  if (capacity_ == 0 || !enabled_) return nullptr;
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.request != request) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru_position);
  ++hits_;
  return &it->second.response;
}

void ResponseCache::put(const std::string& name, const RequestMeta& request, const Response& response) {
  if (capacity_ == 0 || !enabled_) return;
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    it->second.request = request;
    it->second.response = response;
    lru_.splice(lru_.begin(), lru_, it->second.lru_position);
    return;
  }
  if (entries_.size() >= capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(name);
  entries_.emplace(name, Entry{request, response, lru_.begin()});
}

}  // namespace hvd
