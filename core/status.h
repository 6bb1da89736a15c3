// Status and StatusOr<T>: how errors that are the world's fault (I/O, config, peers, data files)
// travel up to the edge of the program, where they become one clear message and an exit code.
// Bugs are not Statuses: they are HOIST_CHECK failures (core/check.h).
// Value types; not thread-safe to mutate concurrently, safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/check.h"

namespace hoist {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // a bad config value, flag or user input
  kNotFound,            // a file, key or checkpoint that does not exist
  kDataLoss,            // a corrupted or truncated file, a checksum mismatch
  kIoError,             // the operating system refused (disk full, permission, ...)
  kFailedPrecondition,  // the request makes no sense in the current state
  kResourceExhausted,   // out of memory or another budget
  kUnavailable,         // a peer or device that is not there
  kDeadlineExceeded,    // a timeout
  kUnimplemented,       // asked for something this build does not have
  kInternal,            // a foreign API failed in a way we cannot classify
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<CodeName>: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy with `context` prepended ("context: message"), for adding where an error
  // happened as it travels up (e.g. the file name around a parse error).
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    HOIST_CHECK(!status_.ok()) << "StatusOr built from an OK Status without a value";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    HOIST_CHECK(ok()) << "value() of a failed StatusOr: " << status_.ToString();
    return *value_;
  }
  const T& value() const& {
    HOIST_CHECK(ok()) << "value() of a failed StatusOr: " << status_.ToString();
    return *value_;
  }
  T&& value() && {
    HOIST_CHECK(ok()) << "value() of a failed StatusOr: " << status_.ToString();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace hoist

#define HOIST_STATUS_CONCAT_INNER(a, b) a##b
#define HOIST_STATUS_CONCAT(a, b) HOIST_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define HOIST_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::hoist::Status hoist_status_ = (expr);        \
    if (!hoist_status_.ok()) return hoist_status_; \
  } while (0)

// `HOIST_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define HOIST_ASSIGN_OR_RETURN(lhs, expr) \
  HOIST_ASSIGN_OR_RETURN_IMPL(HOIST_STATUS_CONCAT(hoist_statusor_, __LINE__), lhs, expr)
#define HOIST_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// Stops the process with the error when `expr` (a Status) is not OK: for code in which an error
// is a bug (tests, benchmarks, examples), never for what a user or a file gave.
#define HOIST_CHECK_OK(expr)                                                 \
  do {                                                                       \
    const ::hoist::Status hoist_check_status_ = (expr);                      \
    HOIST_CHECK(hoist_check_status_.ok()) << hoist_check_status_.ToString(); \
  } while (0)
