// logging.cc - one line per message to stderr, written with a single
// write(2) so lines from the background threads never interleave.
#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <strings.h>
#include <unistd.h>

namespace hvd {
namespace {

std::atomic<int> g_rank{-1};

LogLevel parse_level() {
  const char* v = std::getenv("HOROVOD_LOG_LEVEL");
  if (v == nullptr || v[0] == '\0') return LogLevel::kWarning;
  struct { const char* name; LogLevel level; } table[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warning", LogLevel::kWarning}, {"error", LogLevel::kError}, {"fatal", LogLevel::kFatal}};
  for (auto& e : table) {
    if (strcasecmp(v, e.name) == 0) return e.level;
  }
  return LogLevel::kWarning;
}

LogLevel threshold() {
  static const LogLevel level = parse_level();
  return level;
}

// HOROVOD_LOG_HIDE_TIME=1 leaves the timestamp out (e.g. when a launcher or
// the job's log collector adds its own).
bool hide_time() {
  static const bool hide = [] {
    const char* v = std::getenv("HOROVOD_LOG_HIDE_TIME");
    return v != nullptr && (std::strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 ||
                            strcasecmp(v, "on") == 0);
  }();
  return hide;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kFatal: return "FATAL";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= static_cast<int>(threshold()); }

void set_log_rank(int rank) { g_rank.store(rank); }

void log_message(LogLevel level, const std::string& message) {
  std::string line = "[";
  if (!hide_time()) {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::tm tm_now;
    localtime_r(&now, &tm_now);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S ", &tm_now);
    line += stamp;
  }
  line += "hvd";
  int rank = g_rank.load();
  if (rank >= 0) line += " rank " + std::to_string(rank);
  line += "] ";
  line += level_name(level);
  line += ": ";
  line += message;
  line += "\n";
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

}  // namespace hvd
