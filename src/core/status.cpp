#include "sparrow/status.hpp"

namespace sparrow {

const char* code_name(Code code) {
  switch (code) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid_argument";
    case Code::unsupported: return "unsupported";
    case Code::corrupt_data: return "corrupt_data";
    case Code::out_of_memory: return "out_of_memory";
    case Code::cuda_error: return "cuda_error";
    case Code::io_error: return "io_error";
    case Code::no_device: return "no_device";
    case Code::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

}  // namespace sparrow
