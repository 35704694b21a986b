// error.h - the engine's internal error type. Everything inside the library
// throws hvd::Error; the C ABI layer (c_api/) turns it into an hvd_error*.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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
  // `tensor` and `ranks` say what the error is about, for callers that act on
  // it without reading the message (hvd_error_get_tensor_name/_ranks): the
  // tensor's name, and the global ranks that caused it.
  Error(ErrorCode code, const std::string& message, std::string tensor = {}, std::vector<int> ranks = {})
      : std::runtime_error(message), code_(code), tensor_(std::move(tensor)), ranks_(std::move(ranks)) {}
  ErrorCode code() const { return code_; }
  const std::string& tensor() const { return tensor_; }
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  ErrorCode code_;
  std::string tensor_;
  std::vector<int> ranks_;
};

[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message, std::string tensor = {},
                                     std::vector<int> ranks = {}) {
  throw Error(code, message, std::move(tensor), std::move(ranks));
}

}  // namespace hvd
