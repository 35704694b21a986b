// store.h - the rendezvous key-value store as the engine sees it.
// Implementations: HttpStore (the job's HTTP store, hvd-core's own protocol,
// every request HMAC-signed with the job secret; see docs/rendezvous.md) and
// MemoryStore (in-process, for C++ tests that run ranks as threads).
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>

#include "common/interrupt.h"

namespace hvd {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists. Throws Error(kInternal) naming the key and the
  // timeout when it does not appear in time, or when the store is unreachable.
  virtual std::string get(const std::string& key, double timeout_seconds) = 0;
  // get(), calling `interrupt` (when set) about every kInterruptSliceSeconds
  // while the key is absent; whatever it throws ends the wait. A wait that
  // runs out throws as get() does.
  virtual std::string get_interruptible(const std::string& key, double timeout_seconds, const Interrupt& interrupt);
  // Atomically adds `delta` to the integer at `key` (absent = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` if that can be done within about `timeout_seconds`; never
  // throws. For reports made while failing, which must not hold up the failure.
  virtual void try_set(const std::string& key, const std::string& value, double timeout_seconds) {
    (void)timeout_seconds;
    try {
      set(key, value);
    } catch (const std::exception&) {
    }
  }
};

// A view of another store with every key prefixed by `prefix`.
class PrefixStore : public Store {
 public:
  PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override { base_.set(prefix_ + key, value); }
  std::string get(const std::string& key, double timeout_seconds) override {
    return base_.get(prefix_ + key, timeout_seconds);
  }
  std::string get_interruptible(const std::string& key, double timeout_seconds,
                                const Interrupt& interrupt) override {
    return base_.get_interruptible(prefix_ + key, timeout_seconds, interrupt);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_.add(prefix_ + key, delta); }
  void try_set(const std::string& key, const std::string& value, double timeout_seconds) override {
    base_.try_set(prefix_ + key, value, timeout_seconds);
  }

 private:
  Store& base_;
  std::string prefix_;
};

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, double timeout_seconds) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

// Connects to the job's HTTP store at host:port. Every request carries an
// HMAC-SHA256 signature made with `secret` (see docs/rendezvous.md); an
// operation that gets no answer for `operation_timeout_seconds` fails. The
// engine passes its parsed HOROVOD_GLOO_TIMEOUT_SECONDS; a client of its own
// (a test, a tool) may let the store read that variable itself.
std::unique_ptr<Store> make_http_store(const std::string& host, int port, const std::string& secret,
                                       double operation_timeout_seconds);
std::unique_ptr<Store> make_http_store(const std::string& host, int port,
                                       const std::string& secret);

}  // namespace hvd
