#include "load/sigbus_guard.h"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <mutex>

namespace shardload::load {
namespace {

struct Guard {
  sigjmp_buf jump;
  const std::byte* begin;
  const std::byte* end;
};

// Per thread: the signal is delivered to the thread whose read faulted.
thread_local Guard* active_guard = nullptr;
struct sigaction previous_action {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  Guard* guard = active_guard;
  const auto* at = static_cast<const std::byte*>(info->si_addr);
  if (guard != nullptr && at >= guard->begin && at < guard->end) siglongjmp(guard->jump, 1);
  // Not a guarded read: what would have happened without this handler.
  if ((previous_action.sa_flags & SA_SIGINFO) != 0) {
    previous_action.sa_sigaction(signal, info, context);
  } else if (previous_action.sa_handler == SIG_DFL || previous_action.sa_handler == SIG_IGN) {
    // The faulting access runs again on return and, with the default action, ends the process
    // (a fault's SIGBUS cannot be ignored).
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &fallback, nullptr);
  } else {
    previous_action.sa_handler(signal);
  }
}

void install_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_action);
}

}  // namespace

bool read_mapped_guarded(const std::byte* begin, size_t bytes, const std::function<void()>& read) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  Guard guard{{}, begin, begin + bytes};
  // savemask 1: the long jump also unblocks SIGBUS, which the kernel blocked for the handler.
  if (sigsetjmp(guard.jump, 1) != 0) {
    active_guard = nullptr;
    return false;
  }
  active_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  try {
    read();
  } catch (...) {
    active_guard = nullptr;
    throw;
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  active_guard = nullptr;
  return true;
}

}  // namespace shardload::load
