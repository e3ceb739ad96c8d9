// Buffer<T>: a typed array that lives on the host or on the device. Format objects are made of
// Buffers, so one format type serves both places: encode builds it on the host, to_device()
// uploads each array, kernels read the raw device pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "sparrow/status.hpp"

namespace sparrow {

enum class Location : uint8_t { host, device };

namespace detail {
// Implemented with the CUDA runtime in src/core/device_memory.cpp.
Result<std::shared_ptr<void>> device_alloc(size_t bytes);
Status copy_to_device(void* dst, const void* src, size_t bytes);
Status copy_to_host(void* dst, const void* src, size_t bytes);
}  // namespace detail

template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::vector<T> host) : host_(std::move(host)), size_(host_.size()) {}

  Location location() const { return location_; }
  bool on_device() const { return location_ == Location::device; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

  const T* data() const { return on_device() ? static_cast<const T*>(device_.get()) : host_.data(); }
  T* data() { return on_device() ? static_cast<T*>(device_.get()) : host_.data(); }

  // Host contents; empty for a device buffer.
  const std::vector<T>& host() const { return host_; }
  std::vector<T>& host() { return host_; }
  // Keeps size() in step after the host vector was edited in place (tests that corrupt data).
  void sync_size() {
    if (!on_device()) size_ = host_.size();
  }

  Result<Buffer> to_device() const {
    Buffer out;
    out.location_ = Location::device;
    out.size_ = size_;
    if (size_ == 0) return out;
    auto mem = detail::device_alloc(bytes());
    if (!mem.ok()) return mem.status();
    out.device_ = std::move(mem).value();
    Status s = on_device() ? Status(Code::invalid_argument, "buffer is already on the device")
                           : detail::copy_to_device(out.device_.get(), host_.data(), bytes());
    if (!s.ok()) return s;
    return out;
  }

  Result<Buffer> to_host() const {
    if (!on_device()) return *this;
    std::vector<T> h(size_);
    if (size_ != 0) {
      Status s = detail::copy_to_host(h.data(), device_.get(), bytes());
      if (!s.ok()) return s;
    }
    return Buffer(std::move(h));
  }

 private:
  Location location_ = Location::host;
  std::vector<T> host_;
  std::shared_ptr<void> device_;
  size_t size_ = 0;
};

}  // namespace sparrow
