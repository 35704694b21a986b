// env.cc - typed environment reads; a malformed value is an error that
// names the variable, never a silent default.
#include "common/env.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "common/error.h"

namespace hvd {

bool env_is_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}

std::string env_string(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::string(v) : fallback;
}

int64_t env_int(const char* name, int64_t fallback) {
  if (!env_is_set(name)) return fallback;
  const char* v = std::getenv(name);
  char* end = nullptr;
  long long parsed = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0') {
    throw_error(ErrorCode::kInvalidArgument,
                std::string("environment variable ") + name + "='" + v + "' is not an integer");
  }
  return parsed;
}

double env_double(const char* name, double fallback) {
  if (!env_is_set(name)) return fallback;
  const char* v = std::getenv(name);
  char* end = nullptr;
  double parsed = std::strtod(v, &end);
  // nan and inf parse, but no knob means them: as timeouts they turned into
  // negative durations downstream.
  if (end == v || *end != '\0' || !std::isfinite(parsed)) {
    throw_error(ErrorCode::kInvalidArgument,
                std::string("environment variable ") + name + "='" + v + "' is not a finite number");
  }
  return parsed;
}

bool env_bool(const char* name, bool fallback) {
  if (!env_is_set(name)) return fallback;
  const char* v = std::getenv(name);
  for (const char* t : {"1", "true", "yes", "on", "y"}) {
    if (strcasecmp(v, t) == 0) return true;
  }
  for (const char* f : {"0", "false", "no", "off", "n"}) {
    if (strcasecmp(v, f) == 0) return false;
  }
  throw_error(ErrorCode::kInvalidArgument,
              std::string("environment variable ") + name + "='" + v + "' is not a boolean (use 1 or 0)");
}

}  // namespace hvd
