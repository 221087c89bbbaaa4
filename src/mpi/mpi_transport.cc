// Transport over MPI_COMM_WORLD. Errors come back as return codes (MPI_ERRORS_RETURN), turned into
// Error(kNode) naming the call; a peer that dies ends the job through the launcher.
#include "shardload/mpi_transport.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "shardload/error.h"

namespace shardload {
namespace {

constexpr uint64_t kMaxMessage = uint64_t{1} << 30;  // below MPI's int count, and its 2 GiB limit

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
  }

  ~MpiTransport() override {
    // A send no peer will ever match would keep MPI_Finalize waiting: leave MPI to the process's
    // exit then (the launcher ends the job; the error was already reported).
    if (pending_.empty()) MPI_Finalize();
  }

  int node() const override { return node_; }
  int nodes() const override { return nodes_; }

  std::vector<std::string> all_gather(std::string_view mine) override {
    if (mine.size() > static_cast<size_t>(std::numeric_limits<int>::max() / nodes_)) {
      throw Error(ErrorKind::kInternal, "a gathered message is too large",
                  {.found = std::to_string(mine.size())});
    }
    const int size = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<size_t>(nodes_));
    check(MPI_Allgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD),
          "MPI_Allgather");
    std::vector<int> offsets(static_cast<size_t>(nodes_));
    int64_t total = 0;
    for (int n = 0; n < nodes_; ++n) {
      const int peer = sizes[static_cast<size_t>(n)];
      if (peer < 0 || total + peer > std::numeric_limits<int>::max()) {
        throw Error(ErrorKind::kNode,
                    fmt::format("node {} announced a message of an impossible size", n),
                    {.found = std::to_string(peer)});
      }
      offsets[static_cast<size_t>(n)] = static_cast<int>(total);
      total += peer;
    }
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), size, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                         MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int n = 0; n < nodes_; ++n) {
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(n)]),
                               static_cast<size_t>(sizes[static_cast<size_t>(n)])));
    }
    return out;
  }

  Handle send(int to, int tag, std::span<const std::byte> bytes) override {
    return post(
        bytes.size(),
        [&](uint64_t at, int count, MPI_Request* request) {
          return MPI_Isend(bytes.data() + at, count, MPI_BYTE, to, tag, MPI_COMM_WORLD, request);
        },
        "MPI_Isend", /*is_send=*/true);
  }

  Handle receive(int from, int tag, std::span<std::byte> bytes) override {
    const int source = from == kAnyNode ? MPI_ANY_SOURCE : from;
    return post(
        bytes.size(),
        [&](uint64_t at, int count, MPI_Request* request) {
          return MPI_Irecv(bytes.data() + at, count, MPI_BYTE, source, tag, MPI_COMM_WORLD,
                           request);
        },
        "MPI_Irecv", /*is_send=*/false);
  }

  bool done(Handle handle) override {
    auto it = pending_.find(handle);
    if (it == pending_.end()) throw Error(ErrorKind::kInternal, "a transfer handle was used twice");
    int flag = 0;
    check(MPI_Testall(static_cast<int>(it->second.requests.size()), it->second.requests.data(),
                      &flag, MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (!flag) return false;
    pending_.erase(it);
    return true;
  }

  void abandon(std::vector<std::shared_ptr<const void>> keep_alive) override {
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
    for (auto& owner : keep_alive) kept_.push_back(std::move(owner));
  }

 private:
  struct Pending {
    std::vector<MPI_Request> requests;
    bool is_send = false;
  };

  // One request per kMaxMessage part (one for an empty transfer); parts of one transfer carry the
  // same tag and so match in order.
  template <class Post>
  Handle post(uint64_t bytes, Post&& one, const char* call, bool is_send) {
    Pending pending{.requests = {}, .is_send = is_send};
    uint64_t at = 0;
    do {
      const uint64_t n = std::min(kMaxMessage, bytes - at);
      MPI_Request request = MPI_REQUEST_NULL;
      check(one(at, static_cast<int>(n), &request), call);
      pending.requests.push_back(request);
      at += n;
    } while (at < bytes);
    const Handle handle = next_++;
    pending_.emplace(handle, std::move(pending));
    return handle;
  }

  int node_ = 0;
  int nodes_ = 1;
  Handle next_ = 1;
  std::unordered_map<Handle, Pending> pending_;
  std::vector<std::shared_ptr<const void>>
      kept_;  // owners of bytes an abandoned send may still read
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Transport> make_mpi_transport() { return std::make_unique<MpiTransport>(); }

}  // namespace shardload
