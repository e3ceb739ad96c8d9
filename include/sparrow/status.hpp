// Status and Result: how every sparrow function reports failure. No exceptions cross the public
// API; a failed call returns a Status whose message says what was wrong and, where it helps, what
// the caller can do about it.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace sparrow {

enum class Code {
  ok = 0,
  invalid_argument,  // the caller passed something that can never work (null, bad size, ...)
  unsupported,       // valid input that this build / device / format cannot handle
  corrupt_data,      // an encoded buffer or file failed validation
  out_of_memory,     // host or device allocation failed
  cuda_error,        // a CUDA runtime / library call failed
  io_error,          // a file could not be read or written
  no_device,         // no usable GPU
  internal,          // a bug in sparrow
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status success() { return {}; }

  bool ok() const { return code_ == Code::ok; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: rows must be positive (got 0)"
  std::string to_string() const;

 private:
  Code code_ = Code::ok;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {Code::invalid_argument, std::move(m)}; }
inline Status unsupported(std::string m) { return {Code::unsupported, std::move(m)}; }
inline Status corrupt_data(std::string m) { return {Code::corrupt_data, std::move(m)}; }

// Either a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit on purpose

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sparrow

#define SPARROW_CONCAT_INNER(a, b) a##b
#define SPARROW_CONCAT(a, b) SPARROW_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define SPARROW_RETURN_IF_ERROR(expr)                   \
  do {                                                  \
    ::sparrow::Status sparrow_status_ = (expr);         \
    if (!sparrow_status_.ok()) return sparrow_status_;  \
  } while (0)

// `SPARROW_ASSIGN_OR_RETURN(auto x, f());` unwraps a Result or returns its Status.
#define SPARROW_ASSIGN_OR_RETURN(lhs, expr) \
  SPARROW_ASSIGN_OR_RETURN_IMPL(SPARROW_CONCAT(sparrow_result_, __LINE__), lhs, expr)
#define SPARROW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
