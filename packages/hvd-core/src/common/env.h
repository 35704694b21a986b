// env.h - typed reads of HOROVOD_* environment variables with defaults.
#pragma once

#include <cstdint>
#include <string>

namespace hvd {

bool env_is_set(const char* name);
std::string env_string(const char* name, const std::string& fallback);
// Parse errors throw Error(kInvalidArgument) naming the variable and value.
int64_t env_int(const char* name, int64_t fallback);
double env_double(const char* name, double fallback);
bool env_bool(const char* name, bool fallback);  // 1/0, true/false, yes/no, on/off

}  // namespace hvd
