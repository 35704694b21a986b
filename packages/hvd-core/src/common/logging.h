// logging.h - HOROVOD_LOG_LEVEL-controlled logging to stderr, prefixed with
// the rank as Horovod does ("[1]<stderr>" comes from the launcher; we add
// "[hvd rank 1] WARNING: ...").
#pragma once

#include <sstream>
#include <string>

namespace hvd {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

// Reads HOROVOD_LOG_LEVEL (trace/debug/info/warning/error/fatal, default
// warning) on first use; set_log_rank() tags messages with the rank.
bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);
void set_log_rank(int rank);

}  // namespace hvd

#define HVD_LOG(level, expr)                                     \
  do {                                                           \
    if (::hvd::log_enabled(::hvd::LogLevel::level)) {            \
      std::ostringstream hvd_log_stream_;                        \
      hvd_log_stream_ << expr;                                   \
      ::hvd::log_message(::hvd::LogLevel::level, hvd_log_stream_.str()); \
    }                                                            \
  } while (0)
