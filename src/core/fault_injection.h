#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "shardload/error.h"

// Test-only fault injection, so that the failure paths of an update (an I/O error after data was
// staged, a commit paused while a test kills the process) can be reached on purpose. Compiled in
// only with the CMake option SHARDLOAD_FAULT_INJECTION (on for test builds, off for `make build`
// and Release): without it the hooks below are empty inline functions, so a production binary
// cannot be told to fail and pays nothing for them. When compiled in, off unless the environment
// variable SHARDLOAD_FAULT is set (read once, at the first hook) or a test calls configure().
// Spec: comma separated `key:value` pairs:
//   read_error_after:N   every read fails with an injected EIO once N bytes were read since
//                        configuration
//   kill_after_read:N    the process kills itself (SIGKILL) at the read that passes N bytes (a
//                        node that dies in a distributed load)
//   commit_pause_ms:N    each commit group sleeps N ms after it began (the sequence word is odd
//                        meanwhile)
//   kill_at:POINT        the process kills itself (SIGKILL) when it reaches the named point (a
//                        weight-server node that dies while staging, agreeing or committing)
//   fail_at:POINT        the first time the process reaches the named point it throws an
//                        injected Error(kIo) (one node of several failing an update)
//   fail_every:POINT     every time the process reaches the named point it throws (a write that
//                        keeps failing, e.g. the manifest on a full /dev/shm)
//   hang_at:POINT        the thread that reaches the named point sleeps forever (a node that hangs
//                        without dying: its peers' stall timeout ends the job)
namespace shardload::fault {

#ifdef SHARDLOAD_FAULT_INJECTION

// Replaces the configuration (empty: off) and resets the byte count. Throws
// Error(kInvalidArgument).
void configure(std::string_view spec);

// Called by the readers before reading `bytes`: throws the injected Error(kIo) when due.
void before_read(uint64_t bytes, const ErrorDetails& where);

// Runs `hook` once, after the read that brings the bytes read since this call to `bytes` or more
// (in-process tests: change a file under the reader, cancel, once data is staged).
void after_bytes_read(uint64_t bytes, std::function<void()> hook);
void after_read(uint64_t bytes);

// Called by a commit group once it began.
void in_commit();

// A named point of a multi-step operation (kill_at, fail_at, fail_every, hang_at).
void at(std::string_view point);

#else  // production build: the hooks compile to nothing

inline void before_read(uint64_t /*bytes*/, const ErrorDetails& /*where*/) {}
inline void after_read(uint64_t /*bytes*/) {}
inline void in_commit() {}
inline void at(std::string_view /*point*/) {}

#endif

}  // namespace shardload::fault
