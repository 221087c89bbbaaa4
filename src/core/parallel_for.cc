#include "core/parallel_for.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace shardload {

int default_thread_count() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

void parallel_for(size_t count, int threads, const std::function<void(size_t, int)>& body) {
  if (threads <= 0) threads = default_thread_count();
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(count, 1)));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&](int thread) {
    for (size_t i = next.fetch_add(1); i < count && !failed.load(); i = next.fetch_add(1)) {
      try {
        body(i, thread);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace shardload
