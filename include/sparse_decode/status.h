// The result of every library call: a code and a readable message.
#pragma once

#include <string>
#include <utility>

namespace sparse_decode {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // an argument is malformed; the message names it and the expected value
  kNotSupported,     // a valid call that no path of this build serves; the message says why
  kCudaError,        // the CUDA runtime reported an error
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string message) {
    return {StatusCode::kInvalidArgument, std::move(message)};
  }
  static Status NotSupported(std::string message) {
    return {StatusCode::kNotSupported, std::move(message)};
  }
  static Status CudaError(std::string message) { return {StatusCode::kCudaError, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace sparse_decode
