#include "cli/progress.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>

namespace shardload::cli {
namespace {

constexpr int kWidth = 40;
std::atomic<bool> drawn{false};

void draw(uint64_t done, uint64_t total) {
  const int filled = total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
  std::fprintf(stderr, "\r[%.*s%*s] %3d%%", filled, "########################################",
               kWidth - filled, "", total == 0 ? 100 : static_cast<int>(100 * done / total));
}

}  // namespace

std::function<void(uint64_t, uint64_t)> make_progress_bar() {
  if (!isatty(STDERR_FILENO)) return {};
  auto mutex = std::make_shared<std::mutex>();
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [mutex, last](uint64_t done, uint64_t total) {
    std::unique_lock<std::mutex> lock(*mutex, std::try_to_lock);
    if (!lock.owns_lock()) return;  // another thread is drawing: never make a loader wait on the bar
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - *last < std::chrono::milliseconds(100)) return;
    *last = now;
    draw(done, total);
    drawn = true;
  };
}

void finish_progress_bar() {
  // Threads report out of order and a busy bar drops calls, so the last drawn may be short of the end.
  if (!drawn.exchange(false)) return;
  draw(1, 1);
  std::fprintf(stderr, "\n");
}

}  // namespace shardload::cli
