// error.h - the engine's internal error type. Everything inside the library
// throws hvd::Error; the C ABI layer (c_api/) turns it into an hvd_error*.
#pragma once

#include <stdexcept>
#include <string>

#include "hvd/c_api.h"

namespace hvd {

enum class ErrorCode : int {
  kInvalidArgument = HVD_ERROR_INVALID_ARGUMENT,
  kNotInitialized = HVD_ERROR_NOT_INITIALIZED,
  kPrecondition = HVD_ERROR_PRECONDITION,
  kInternal = HVD_ERROR_INTERNAL,  // peer failure, broken link, timeout, shut down
  kTimeout = HVD_ERROR_TIMEOUT,    // only for hvd_handle_wait
  kDuplicateName = HVD_ERROR_DUPLICATE_NAME,
  kUnsupported = HVD_ERROR_UNSUPPORTED,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

}  // namespace hvd
