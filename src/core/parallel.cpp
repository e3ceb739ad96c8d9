#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace sparrow {

Status parallel_for(int64_t n, int threads, const std::function<Status(int64_t)>& fn) {
  if (n <= 0) return Status::success();
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads = int(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    for (int64_t i; (i = next++) < n;) {
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace sparrow
