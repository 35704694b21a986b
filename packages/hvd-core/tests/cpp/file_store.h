// file_store.h - a Store backed by files in one directory, so forked test
// and benchmark processes can rendezvous without a server.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/error.h"
#include "rendezvous/store.h"

namespace hvd_test {

// Keys are files in a private directory; good enough for one benchmark run.
class FileStore : public hvd::Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, const std::string& value) override {
    std::string path = path_for(key), tmp = path + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp) << value;
    std::rename(tmp.c_str(), path.c_str());
  }
  std::string get(const std::string& key, double timeout_seconds) override {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    for (;;) {
      std::ifstream in(path_for(key));
      if (in) {
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
      }
      if (std::chrono::steady_clock::now() > end) hvd::throw_error(hvd::ErrorCode::kInternal, "bench store: no key " + key);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int lock = open((dir_ + "/lock").c_str(), O_CREAT | O_RDWR, 0600);
    flock(lock, LOCK_EX);
    int64_t value = 0;
    std::ifstream in(path_for(key));
    if (in) in >> value;
    value += delta;
    set(key, std::to_string(value));
    flock(lock, LOCK_UN);
    close(lock);
    return value;
  }

 private:
  std::string path_for(const std::string& key) {
    std::string name;
    for (char c : key) name.push_back(c == '/' ? '_' : c);
    return dir_ + "/" + name;
  }
  std::string dir_;
};

}  // namespace hvd_test
