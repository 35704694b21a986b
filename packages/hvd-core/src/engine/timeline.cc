// timeline.cc - see timeline.h for the file's shape.
#include "engine/timeline.h"

#include <cstring>

#include "common/error.h"

namespace hvd {

static std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  stop();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    throw_error(ErrorCode::kInvalidArgument,
                "cannot open timeline file '" + path + "': " + std::strerror(errno));
  }
  std::unique_lock<std::mutex> lock(mu_);
  file_ = f;
  std::fputs("[\n", file_);
  body_end_ = std::ftell(file_);
  std::fputs("\n]\n", file_);
  std::fflush(file_);
  first_event_ = true;
  stopping_ = false;
  pending_.clear();
  tensor_pids_.clear();
  mark_cycles_ = mark_cycles;
  start_time_ = std::chrono::steady_clock::now();
  active_.store(true);
  writer_ = std::thread([this] { writer_loop(); });
}

void Timeline::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!active_.load()) return;
  active_.store(false);
  stopping_ = true;
  cv_.notify_all();
  lock.unlock();
  if (writer_.joinable()) writer_.join();
  lock.lock();
  std::vector<std::string> rest;
  rest.swap(pending_);
  std::FILE* file = file_;
  lock.unlock();
  write_events(rest);
  std::fclose(file);
  lock.lock();
  file_ = nullptr;
}

int64_t Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_time_)
      .count();
}

void Timeline::emit(const std::string& tensor, const std::string& body, bool opens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_.load()) return;
  auto it = tensor_pids_.find(tensor);
  int pid;
  if (it == tensor_pids_.end()) {
    // A timeline started at run time must not show the tail (an "E" or a
    // rank-ready mark) of an operation that began before it: only an opening
    // event introduces a tensor.
    if (!opens) return;
    pid = static_cast<int>(tensor_pids_.size()) + 1;
    tensor_pids_.emplace(tensor, pid);
    pending_.push_back("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
                       ", \"args\": {\"name\": \"" + json_escape(tensor) + "\"}}");
    pending_.push_back("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " +
                       std::to_string(pid) + ", \"args\": {\"sort_index\": " + std::to_string(pid) +
                       "}}");
  } else {
    pid = it->second;
  }
  pending_.push_back("{" + body + ", \"pid\": " + std::to_string(pid) + ", \"tid\": 1}");
}

void Timeline::negotiate_start(const std::string& tensor, const std::string& op_upper) {
  if (!active()) return;
  emit(tensor, "\"name\": \"NEGOTIATE_" + op_upper + "\", \"ph\": \"B\", \"ts\": " + std::to_string(now_us()),
       true);
}

void Timeline::negotiate_rank_ready(const std::string& tensor, int rank) {
  if (!active()) return;
  emit(tensor, "\"name\": \"" + std::to_string(rank) + "\", \"ph\": \"i\", \"s\": \"t\", \"ts\": " +
                   std::to_string(now_us()));
}

void Timeline::negotiate_end(const std::string& tensor) {
  if (!active()) return;
  emit(tensor, "\"ph\": \"E\", \"ts\": " + std::to_string(now_us()));
}

void Timeline::op_start(const std::string& tensor, const std::string& op_upper) {
  if (!active()) return;
  emit(tensor, "\"name\": \"" + op_upper + "\", \"ph\": \"B\", \"ts\": " + std::to_string(now_us()), true);
}

void Timeline::activity_start(const std::string& tensor, const std::string& activity) {
  if (!active()) return;
  emit(tensor, "\"name\": \"" + json_escape(activity) + "\", \"ph\": \"B\", \"ts\": " + std::to_string(now_us()));
}

void Timeline::activity_end(const std::string& tensor) {
  if (!active()) return;
  emit(tensor, "\"ph\": \"E\", \"ts\": " + std::to_string(now_us()));
}

void Timeline::op_end(const std::string& tensor) { activity_end(tensor); }

void Timeline::mark_cycle() {
  if (!active() || !mark_cycles_) return;
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back("{\"name\": \"CYCLE_START\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, \"ts\": " +
                     std::to_string(now_us()) + "}");
}

void Timeline::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::string> batch;
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    batch.clear();
    batch.swap(pending_);
    lock.unlock();
    write_events(batch);
    lock.lock();
  }
}

void Timeline::write_events(const std::vector<std::string>& events) {
  if (file_ == nullptr || events.empty()) return;
  std::string chunk;
  for (const auto& e : events) {
    if (!first_event_) chunk += ",\n";
    first_event_ = false;
    chunk += e;
  }
  // Overwrite the closing bracket with the new events, then put it back.
  std::fseek(file_, body_end_, SEEK_SET);
  std::fwrite(chunk.data(), 1, chunk.size(), file_);
  body_end_ = std::ftell(file_);
  std::fputs("\n]\n", file_);
  std::fflush(file_);
}

}  // namespace hvd
