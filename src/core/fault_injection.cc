#include "core/fault_injection.h"

// Only test builds compile the injection in (see the header); production builds get the empty
// inline hooks and nothing from this file.
#ifdef SHARDLOAD_FAULT_INJECTION

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace shardload::fault {
namespace {

struct State {
  std::mutex mutex;
  std::atomic<bool> enabled{false};
  std::atomic<int64_t> read_error_after{-1};
  std::atomic<int64_t> kill_after{-1};
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<int> commit_pause_ms{0};
  std::function<void()> after_read;  // guarded by mutex
  std::atomic<bool> has_after_read{false};
  std::atomic<uint64_t> after_read_bytes{0};  // bytes still to read before the hook runs
  std::string kill_at;  // guarded by mutex
  std::string fail_at;  // guarded by mutex; fires once
  std::string fail_every;  // guarded by mutex; fires every time
  std::string hang_at;     // guarded by mutex
};

State& state() {
  static State s;
  return s;
}

void apply(State& s, std::string_view spec) {
  int64_t read_error_after = -1;
  int64_t kill_after = -1;
  int commit_pause_ms = 0;
  std::string kill_at;
  std::string fail_at;
  std::string fail_every;
  std::string hang_at;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const size_t colon = item.find(':');
    const std::string key(item.substr(0, colon));
    const std::string value(colon == std::string_view::npos ? "" : item.substr(colon + 1));
    if (key == "kill_at" || key == "fail_at" || key == "fail_every" || key == "hang_at") {
      (key == "kill_at"      ? kill_at
       : key == "fail_at"    ? fail_at
       : key == "fail_every" ? fail_every
                             : hang_at) = value;
      continue;
    }
    char* end = nullptr;
    const long long number = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || number < 0) {
      throw Error(ErrorKind::kInvalidArgument, "bad fault injection spec",
                  {.field = "SHARDLOAD_FAULT",
                   .expected = "key:N with N >= 0",
                   .found = std::string(item)});
    }
    if (key == "read_error_after") {
      read_error_after = number;
    } else if (key == "kill_after_read") {
      kill_after = number;
    } else if (key == "commit_pause_ms") {
      commit_pause_ms = static_cast<int>(number);
    } else {
      throw Error(ErrorKind::kInvalidArgument, "unknown fault injection key",
                  {.field = "SHARDLOAD_FAULT",
                   .expected = "read_error_after, kill_after_read, commit_pause_ms, kill_at, "
                               "fail_at, fail_every or hang_at",
                   .found = key});
    }
  }
  s.read_error_after = read_error_after;
  s.kill_after = kill_after;
  s.commit_pause_ms = commit_pause_ms;
  s.bytes_read = 0;
  s.kill_at = kill_at;
  s.fail_at = fail_at;
  s.fail_every = fail_every;
  s.hang_at = hang_at;
  s.enabled = read_error_after >= 0 || kill_after >= 0 || commit_pause_ms > 0 || s.has_after_read ||
              !kill_at.empty() || !fail_at.empty() || !fail_every.empty() || !hang_at.empty();
}

State& configured() {
  static std::once_flag once;
  State& s = state();
  std::call_once(once, [&] {
    const char* env = std::getenv("SHARDLOAD_FAULT");
    if (env != nullptr) apply(s, env);
  });
  return s;
}

}  // namespace

void configure(std::string_view spec) {
  State& s = configured();
  std::lock_guard lock(s.mutex);
  apply(s, spec);
}

void at(std::string_view point) {
  State& s = configured();
  if (!s.enabled.load(std::memory_order_relaxed)) return;
  std::unique_lock lock(s.mutex);
  if (s.kill_at == point) std::raise(SIGKILL);
  if (s.hang_at == point) {
    lock.unlock();  // other threads keep running: only this one hangs
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (s.fail_at == point || s.fail_every == point) {
    if (s.fail_at == point) s.fail_at.clear();
    throw Error(ErrorKind::kIo, fmt::format("injected failure at {} (SHARDLOAD_FAULT)", point));
  }
}

void before_read(uint64_t bytes, const ErrorDetails& where) {
  State& s = configured();
  if (!s.enabled.load(std::memory_order_relaxed)) return;
  const int64_t limit = s.read_error_after.load();
  const int64_t kill = s.kill_after.load();
  if (limit < 0 && kill < 0) return;
  const uint64_t before = s.bytes_read.fetch_add(bytes);
  if (kill >= 0 && before + bytes > static_cast<uint64_t>(kill)) std::raise(SIGKILL);  // a node that dies
  if (limit >= 0 && before + bytes > static_cast<uint64_t>(limit)) {
    throw Error(ErrorKind::kIo, "read failed: Input/output error (injected by SHARDLOAD_FAULT)",
                where);
  }
}

void after_bytes_read(uint64_t bytes, std::function<void()> hook) {
  State& s = configured();
  std::lock_guard lock(s.mutex);
  s.after_read = std::move(hook);
  s.after_read_bytes = bytes;
  s.has_after_read = static_cast<bool>(s.after_read);
  s.enabled = s.enabled || s.has_after_read;
}

void after_read(uint64_t bytes) {
  State& s = configured();
  if (!s.has_after_read.load(std::memory_order_relaxed)) return;
  std::function<void()> hook;
  {
    std::lock_guard lock(s.mutex);
    const uint64_t left = s.after_read_bytes.load();
    if (left > bytes) {
      s.after_read_bytes = left - bytes;
      return;
    }
    hook = std::move(s.after_read);
    s.after_read = nullptr;
    s.has_after_read = false;
  }
  if (hook) hook();
}

void in_commit() {
  const int ms = configured().commit_pause_ms.load(std::memory_order_relaxed);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace shardload::fault

#endif  // SHARDLOAD_FAULT_INJECTION
