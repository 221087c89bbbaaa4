#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardload {

// The few operations a distributed load needs from the processes that run it, one process per
// node: MPI today (shardload/mpi_transport.h); an NCCL or Gloo backend implements the same. One
// thread at a time calls a transport. Tags 32760 and above are the backend's own.
//
// A peer that hangs (alive, but no longer taking part) would keep every node waiting forever: a
// node that waits on peers while none of its transfers moves for the stall timeout names the peer
// it heard from least recently as stalled and tells the others, and from then on every call on
// every node that learned it throws the same Error(kNode), "node K of N: stalled ...". The job
// cannot go on without that node: destroying a stalled transport ends the whole job (MPI_Abort),
// after the live nodes met (or the stall timeout passed), so that each printed its error first.
class Transport {
 public:
  using Handle = uint64_t;
  static constexpr int kAnyNode = -1;

  virtual ~Transport() = default;
  virtual int node() const = 0;
  virtual int nodes() const = 0;
  // Collective (every node calls it, in the same order): each node's bytes, gathered on every
  // node in node order.
  virtual std::vector<std::string> all_gather(std::string_view mine) = 0;
  // Non-blocking point-to-point, of any size (split by the backend where it must be). Messages
  // from one node to another with the same tag arrive in the order they were sent. The bytes must
  // stay alive and untouched until done() returned true for the handle.
  virtual Handle send(int to, int tag, std::span<const std::byte> bytes) = 0;
  virtual Handle receive(int from, int tag, std::span<std::byte> bytes) = 0;
  // Progresses the transfers; true once the handle's transfer completed (the handle is then spent).
  virtual bool done(Handle handle) = 0;
  // After an error: drops every handle not done. Receives are cancelled; sends a peer will never
  // match are left to the backend, which keeps their bytes' owners alive (`keep_alive`) until it
  // shuts down.
  virtual void abandon(std::vector<std::shared_ptr<const void>> keep_alive) = 0;

  // receive(), for a wait that lasts as long as the peer likes (a follower idle until node 0's next
  // command): the stall timeout does not apply to it.
  virtual Handle receive_idle(int from, int tag, std::span<std::byte> bytes) = 0;
  // How long a wait may go without any transfer moving; zero: forever (the default).
  virtual void set_stall_timeout(std::chrono::milliseconds timeout) = 0;
  // True once this node learned of a stall: every call but abandon() then throws its error. Any
  // thread may ask.
  virtual bool stalled() const = 0;
};

}  // namespace shardload
