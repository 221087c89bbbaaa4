// Transport over MPI_COMM_WORLD. Errors come back as return codes (MPI_ERRORS_RETURN), turned into
// Error(kNode) naming the call; a peer that dies ends the job through the launcher, one that hangs
// through the stall timeout (shardload/transport.h). Every wait is a poll of non-blocking calls:
// MPI's blocking collectives cannot time out, nor tell which node never joined.
#include "shardload/mpi_transport.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>

#include "shardload/error.h"

namespace shardload {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxMessage = uint64_t{1} << 30;  // below MPI's int count, and its 2 GiB limit
constexpr int kGatherTag = 32760;                    // all_gather's messages
constexpr int kStallTag = 32761;  // {stalled node, timeout in ms}, from a node that saw the stall
constexpr int kEndTag = 32762;    // the live nodes' last meeting after a stall
constexpr auto kNoticePeriod = std::chrono::milliseconds(10);  // how often waits look for notices
constexpr auto kLongestNap = std::chrono::milliseconds(1);     // a gather's poll period, at most
constexpr auto kAbortWait = std::chrono::seconds(10);  // for the node that ends the job to do it

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

void check(int code, const char* call) {
  if (code != MPI_SUCCESS)
    throw Error(ErrorKind::kNode, fmt::format("{} failed: {}", call, mpi_error_text(code)));
}

// The same text on every node that learns of the stall: it depends only on the stalled node and
// the timeout of the node that saw it.
Error stall_error(int node, int nodes, int64_t timeout_ms) {
  return Error(ErrorKind::kNode,
               fmt::format("node {} of {}: stalled: it sent nothing for {:g} s while the other nodes "
                           "waited on it (--stall-timeout); the job ends",
                           node, nodes, static_cast<double>(timeout_ms) / 1000.0));
}

class MpiTransport final : public Transport {
 public:
  MpiTransport() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) throw Error(ErrorKind::kInternal, "MPI was initialized twice in one process");
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw Error(ErrorKind::kNode, "this MPI cannot be called from several threads in turn",
                  {.expected = "MPI_THREAD_SERIALIZED", .found = std::to_string(provided)});
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &node_);
    MPI_Comm_size(MPI_COMM_WORLD, &nodes_);
    activity_ = notices_checked_ = Clock::now();
    last_heard_.assign(static_cast<size_t>(nodes_), activity_);
  }

  ~MpiTransport() override {
    if (stall_) end_job_after_stall();
    // A send no peer will ever match would keep MPI_Finalize waiting: leave MPI to the process's
    // exit then (the launcher ends the job; the error was already reported).
    if (pending_.empty()) MPI_Finalize();
  }

  int node() const override { return node_; }
  int nodes() const override { return nodes_; }

  void set_stall_timeout(std::chrono::milliseconds timeout) override { stall_timeout_ = timeout; }
  bool stalled() const override { return stalled_.load(); }

  // Each node sends its bytes to every other and takes theirs as they come (their size from a
  // probe), so that a wait knows which nodes it still waits on.
  std::vector<std::string> all_gather(std::string_view mine) override {
    throw_if_stalled();
    if (mine.size() > kMaxMessage) {
      throw Error(ErrorKind::kInternal, "a gathered message is too large",
                  {.found = std::to_string(mine.size())});
    }
    std::vector<std::string> out(static_cast<size_t>(nodes_));
    out[static_cast<size_t>(node_)] = std::string(mine);
    std::vector<Handle> sends;
    for (int n = 0; n < nodes_; ++n) {
      if (n != node_) sends.push_back(send(n, kGatherTag, std::as_bytes(std::span(mine))));
    }
    std::vector<int> missing;  // the nodes whose bytes have not come
    for (int n = 0; n < nodes_; ++n) {
      if (n != node_) missing.push_back(n);
    }
    auto nap = std::chrono::microseconds(10);
    while (!missing.empty() || !sends.empty()) {
      const size_t before = missing.size() + sends.size();
      std::erase_if(missing, [&](int n) { return take_gathered(n, out[static_cast<size_t>(n)]); });
      std::erase_if(sends, [&](Handle h) { return tested(h); });
      if (missing.size() + sends.size() < before) {
        nap = std::chrono::microseconds(10);
        continue;
      }
      look_for_notices();
      if (stall_due()) {
        std::vector<int> waited_on = missing;
        for (Handle h : sends) waited_on.push_back(pending_.at(h).peer);
        stall(least_recently_heard(waited_on));
      }
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, kLongestNap);
    }
    return out;
  }

  Handle send(int to, int tag, std::span<const std::byte> bytes) override {
    throw_if_stalled();
    return post(
        bytes.size(),
        [&](uint64_t at, int count, MPI_Request* request) {
          return MPI_Isend(bytes.data() + at, count, MPI_BYTE, to, tag, MPI_COMM_WORLD, request);
        },
        "MPI_Isend", {.requests = {}, .peer = to, .is_send = true, .idle = false});
  }

  Handle receive(int from, int tag, std::span<std::byte> bytes) override {
    return post_receive(from, tag, bytes, /*idle=*/false);
  }

  Handle receive_idle(int from, int tag, std::span<std::byte> bytes) override {
    return post_receive(from, tag, bytes, /*idle=*/true);
  }

  bool done(Handle handle) override {
    throw_if_stalled();
    const auto it = pending_.find(handle);
    if (it == pending_.end()) throw Error(ErrorKind::kInternal, "a transfer handle was used twice");
    const bool idle = it->second.idle;
    if (tested(handle)) return true;
    look_for_notices();
    if (!idle && stall_due()) {
      // Any of this node's transfers moving is progress: a wait on one peer may be a wait on
      // another that the first waits on in turn. The peer heard from least recently is the one
      // the others wait on.
      std::vector<int> waited_on;
      for (const auto& [h, pending] : pending_) {
        if (!pending.idle && pending.peer != kAnyNode) waited_on.push_back(pending.peer);
      }
      if (!waited_on.empty()) stall(least_recently_heard(waited_on));
    }
    return false;
  }

  void abandon(std::vector<std::shared_ptr<const void>> keep_alive) override {
    for (auto& owner : keep_alive) kept_.push_back(std::move(owner));
    if (stall_) return;  // the job ends with this transport: nothing to tidy
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.is_send) {
        ++it;
        continue;
      }
      for (MPI_Request& request : it->second.requests) {
        if (request == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
      }
      it = pending_.erase(it);
    }
  }

 private:
  struct Pending {
    std::vector<MPI_Request> requests;
    int peer = kAnyNode;
    bool is_send = false;
    bool idle = false;  // receive_idle: no stall timeout
  };

  Handle post_receive(int from, int tag, std::span<std::byte> bytes, bool idle) {
    throw_if_stalled();
    const int source = from == kAnyNode ? MPI_ANY_SOURCE : from;
    return post(
        bytes.size(),
        [&](uint64_t at, int count, MPI_Request* request) {
          return MPI_Irecv(bytes.data() + at, count, MPI_BYTE, source, tag, MPI_COMM_WORLD,
                           request);
        },
        "MPI_Irecv", {.requests = {}, .peer = from, .is_send = false, .idle = idle});
  }

  // One request per kMaxMessage part (one for an empty transfer); parts of one transfer carry the
  // same tag and so match in order.
  template <class Post>
  Handle post(uint64_t bytes, Post&& one, const char* call, Pending pending) {
    uint64_t at = 0;
    do {
      const uint64_t n = std::min(kMaxMessage, bytes - at);
      MPI_Request request = MPI_REQUEST_NULL;
      check(one(at, static_cast<int>(n), &request), call);
      pending.requests.push_back(request);
      at += n;
    } while (at < bytes);
    const Handle handle = next_++;
    if (!pending.idle) activity_ = Clock::now();  // a new wait starts its own clock
    pending_.emplace(handle, std::move(pending));
    return handle;
  }

  // Whether the transfer completed; a completed one is spent, and a receive counts as hearing from
  // its peer (a send may complete without the peer: MPI buffers small ones).
  bool tested(Handle handle) {
    Pending& pending = pending_.at(handle);
    int flag = 0;
    check(MPI_Testall(static_cast<int>(pending.requests.size()), pending.requests.data(), &flag,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (!flag) return false;
    if (!pending.idle) heard(pending.is_send ? kAnyNode : pending.peer);
    pending_.erase(handle);
    return true;
  }

  // Node n's all_gather bytes into `out` when they have come.
  bool take_gathered(int n, std::string& out) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    check(MPI_Improbe(n, kGatherTag, MPI_COMM_WORLD, &flag, &message, &status), "MPI_Improbe");
    if (!flag) return false;
    int count = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    if (count < 0 || static_cast<uint64_t>(count) > kMaxMessage) {
      throw Error(ErrorKind::kNode,
                  fmt::format("node {} sent a gathered message of an impossible size", n),
                  {.found = std::to_string(count)});
    }
    out.assign(static_cast<size_t>(count), '\0');
    check(MPI_Mrecv(out.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    heard(n);
    return true;
  }

  void heard(int peer) {
    activity_ = Clock::now();
    if (peer != kAnyNode) last_heard_[static_cast<size_t>(peer)] = activity_;
  }

  bool stall_due() const {
    return stall_timeout_.count() > 0 && Clock::now() - activity_ >= stall_timeout_;
  }

  // Ties go to the lowest node, so that nodes that saw the same go the same way.
  int least_recently_heard(const std::vector<int>& peers) const {
    int oldest = peers.front();
    for (int n : peers) {
      const Clock::time_point at = last_heard_[static_cast<size_t>(n)];
      const Clock::time_point best = last_heard_[static_cast<size_t>(oldest)];
      if (at < best || (at == best && n < oldest)) oldest = n;
    }
    return oldest;
  }

  void throw_if_stalled() const {
    if (stall_) throw *stall_;
  }

  // This node saw `node` stall: it tells every other live node (which may be waiting on something
  // else, or not in the transport at the moment) and throws.
  [[noreturn]] void stall(int node) {
    learn_stall(node, stall_timeout_.count());
    notice_ = {node, stall_timeout_.count()};
    for (int n = 0; n < nodes_; ++n) {
      if (n == node_ || n == node) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(notice_.data(), 2, MPI_INT64_T, n, kStallTag, MPI_COMM_WORLD, &request) ==
          MPI_SUCCESS) {
        notices_.push_back(request);
      }
    }
    throw *stall_;
  }

  void learn_stall(int node, int64_t timeout_ms) {
    stall_ = stall_error(node, nodes_, timeout_ms);
    stalled_node_ = node;
    stalled_ = true;
  }

  // A stall another node saw: adopted (the first one told), then thrown.
  void look_for_notices() {
    const auto now = Clock::now();
    if (now - notices_checked_ < kNoticePeriod) return;
    notices_checked_ = now;
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    check(MPI_Improbe(MPI_ANY_SOURCE, kStallTag, MPI_COMM_WORLD, &flag, &message, &status),
          "MPI_Improbe");
    if (!flag) return;
    std::array<int64_t, 2> notice{};
    check(MPI_Mrecv(notice.data(), 2, MPI_INT64_T, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    if (notice[0] < 0 || notice[0] >= nodes_ || notice[1] <= 0) {
      throw Error(ErrorKind::kNode,
                  fmt::format("node {} sent a stall notice that is not one", status.MPI_SOURCE));
    }
    learn_stall(static_cast<int>(notice[0]), notice[1]);
    throw *stall_;
  }

  // After a stall: the live nodes meet once more (each has printed its error by now), for at most
  // the stall timeout, then one ends the job. MPI_Finalize would wait for the stalled node forever.
  [[noreturn]] void end_job_after_stall() noexcept {
    const std::byte out{1};
    std::vector<std::byte> in(static_cast<size_t>(nodes_));
    std::vector<MPI_Request> requests;
    for (int n = 0; n < nodes_; ++n) {
      if (n == node_ || n == stalled_node_) continue;
      requests.emplace_back();
      MPI_Isend(&out, 1, MPI_BYTE, n, kEndTag, MPI_COMM_WORLD, &requests.back());
      requests.emplace_back();
      MPI_Irecv(&in[static_cast<size_t>(n)], 1, MPI_BYTE, n, kEndTag, MPI_COMM_WORLD,
                &requests.back());
    }
    const auto deadline = Clock::now() + std::max<std::chrono::milliseconds>(
                                             stall_timeout_, std::chrono::seconds(1));
    int flag = 0;
    while (Clock::now() < deadline) {
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
      if (flag) break;
      std::this_thread::sleep_for(kLongestNap);
    }
    // The lowest live node ends the job; the others wait for that a while (several aborts at once
    // garble the launcher's report).
    const int lowest = stalled_node_ == 0 ? 1 : 0;
    if (flag && node_ != lowest) std::this_thread::sleep_for(kAbortWait);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return
  }

  int node_ = 0;
  int nodes_ = 1;
  Handle next_ = 1;
  std::unordered_map<Handle, Pending> pending_;
  std::vector<std::shared_ptr<const void>>
      kept_;  // owners of bytes an abandoned send may still read
  std::chrono::milliseconds stall_timeout_{0};
  Clock::time_point activity_;  // a transfer completed, or one was posted
  Clock::time_point notices_checked_;
  std::vector<Clock::time_point> last_heard_;  // per node: a transfer with it completed
  std::optional<Error> stall_;
  int stalled_node_ = -1;
  std::atomic<bool> stalled_{false};
  std::array<int64_t, 2> notice_{};  // what stall() sends; alive until the job ends
  std::vector<MPI_Request> notices_;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Transport> make_mpi_transport() { return std::make_unique<MpiTransport>(); }

}  // namespace shardload
