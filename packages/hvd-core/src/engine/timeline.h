// timeline.h - HOROVOD_TIMELINE: a Chrome-trace (JSON array) file recording,
// per tensor, negotiation (NEGOTIATE_<OP>, with an instant event per rank as
// it becomes ready), the operation (<OP>) and its activities
// (MEMCPY_IN_FUSION_BUFFER, the transport's collective, ...). Only global
// rank 0 writes. A writer thread appends events in batches and rewrites the
// closing bracket after each batch, so the file on disk is valid JSON
// whenever a batch has been flushed, while the job is still running.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace hvd {

class Timeline {
 public:
  ~Timeline();
  void start(const std::string& path, bool mark_cycles);  // throws Error(kInvalidArgument) if unopenable
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  void negotiate_start(const std::string& tensor, const std::string& op_upper);
  void negotiate_rank_ready(const std::string& tensor, int rank);
  void negotiate_end(const std::string& tensor);
  void op_start(const std::string& tensor, const std::string& op_upper);
  void activity_start(const std::string& tensor, const std::string& activity);
  void activity_end(const std::string& tensor);
  void op_end(const std::string& tensor);
  void mark_cycle();

 private:
  void emit(const std::string& tensor, const std::string& event_json_without_pid, bool opens = false);
  void writer_loop();
  // Appends events to the file. Called without mu_ (a slow disk must not
  // hold up the threads recording events), by the writer thread or by stop()
  // once the writer has ended: the file and its position are theirs alone.
  void write_events(const std::vector<std::string>& events);
  int64_t now_us() const;

  std::atomic<bool> active_{false};
  bool mark_cycles_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::FILE* file_ = nullptr;
  long body_end_ = 0;
  bool first_event_ = true;
  bool stopping_ = false;
  std::vector<std::string> pending_;
  std::unordered_map<std::string, int> tensor_pids_;
  std::chrono::steady_clock::time_point start_time_;
  std::thread writer_;
};

}  // namespace hvd
