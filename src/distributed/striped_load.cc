// One node's part of a distributed load. Striped: worker threads read this node's chunks into
// transfer buffers and fill its own ranks from them; the calling thread, the only one that talks to
// the transport, sends each read chunk to the other nodes that need it (in chunk order, so that a
// pair of nodes matches messages in order), posts receives for the chunks others read, in chunk
// order, and hands what arrives to the workers. Every node handles chunks in the same global order
// and frees buffers without waiting on anything but local work and the transfers they hold, so the
// lowest chunk not yet delivered always moves: no deadlock. An error stops this node and tells the
// others (an abort message); run_on_every_node then makes it the same error everywhere.
#include "distributed/striped_load.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "distributed/peer_failed.h"
#include "format/posix_io.h"
#include "load/direct_reader.h"
#include "load/executor.h"
#include "load/file_access.h"
#include "load/postprocess_ranks.h"
#include "shardload/error.h"

namespace shardload::distributed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kIdleWait = std::chrono::microseconds(200);  // the transport thread's poll period
constexpr auto kAbortSendWait = std::chrono::seconds(2);    // to hand the abort messages over
constexpr int kMinReadBuffers = 2;  // transfer buffers per node: clamp(threads, 2, 8) for reads
constexpr int kMaxReadBuffers = 8;
constexpr int kMinReceiveBuffers = 4;   // and clamp(2 x threads, 4, 16) for receives: at most 24
constexpr int kMaxReceiveBuffers = 16;  // chunks (16 MiB each at most) in flight, 384 MiB
constexpr int kTagsPerLoad = 2;
constexpr int kLoadTags = 16000;  // tags stay below 32767, MPI's smallest allowed upper bound

// A transfer buffer, aligned for O_DIRECT reads with a block of slack at each end; shared so that
// the transport can keep it alive after an error (Transport::abandon).
using Buffer = std::shared_ptr<AlignedBuffer>;
Buffer make_buffer(uint64_t bytes) {
  return std::make_shared<AlignedBuffer>(bytes + 2 * load::kDirectAlignment,
                                         load::kDirectAlignment);
}

// The wall span during which a stage had work: from its first start to its last end.
struct StageSpan {
  Clock::time_point first{};
  Clock::time_point last{};
  bool started = false;

  void begin(Clock::time_point now) {
    if (!started) first = now;
    started = true;
  }
  void end(Clock::time_point now) { last = now; }
  double seconds() const {
    return started ? std::chrono::duration<double>(last - first).count() : 0.0;
  }
};

class StripedLoad {
 public:
  StripedLoad(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
              Transport& transport, const load::Executor& executor, int threads, int epoch)
      : ckpt_(ckpt),
        plan_(plan),
        reads_(reads),
        transport_(transport),
        executor_(executor),
        me_(transport.node()),
        threads_(threads),
        data_tag_(epoch % kLoadTags * kTagsPerLoad),
        abort_tag_(data_tag_ + 1) {
    uint64_t read_max = 0;
    uint64_t receive_max = 0;
    for (size_t c = 0; c < reads.chunks.size(); ++c) {
      const ReadChunk& chunk = reads.chunks[c];
      if (chunk.reader == me_) {
        mine_.push_back({c});
        read_max = std::max(read_max, chunk.bytes);
        bytes_read_ += chunk.bytes;
      } else if (chunk.needed_by(me_)) {
        incoming_.push_back(c);
        receive_max = std::max(receive_max, chunk.bytes);
      }
    }
    for (int i = 0; i < std::clamp(threads, kMinReadBuffers, kMaxReadBuffers); ++i) {
      free_reads_.push_back(make_buffer(read_max));
    }
    for (int i = 0; i < std::clamp(2 * threads, kMinReceiveBuffers, kMaxReceiveBuffers); ++i) {
      free_receives_.push_back(make_buffer(receive_max));
    }
    all_buffers_.insert(all_buffers_.end(), free_reads_.begin(), free_reads_.end());
    all_buffers_.insert(all_buffers_.end(), free_receives_.begin(), free_receives_.end());
  }

  void run(NodeLoadStats& stats) {
    static const std::byte abort_byte{1};
    std::byte abort_in{};
    abort_handle_ = transport_.receive(Transport::kAnyNode, abort_tag_, {&abort_in, 1});
    std::vector<std::thread> workers;
    for (int i = 0; i < threads_; ++i) workers.emplace_back([this] { work(); });
    bool peer_failed = false;
    try {
      peer_failed = drive();
    } catch (...) {  // the transport failed
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_ready_.notify_all();
    for (std::thread& t : workers) t.join();
    if (error_ && !peer_failed) tell_peers(abort_byte);
    std::vector<std::shared_ptr<const void>> keep(all_buffers_.begin(), all_buffers_.end());
    transport_.abandon(std::move(keep));
    if (error_) std::rethrow_exception(error_);
    if (peer_failed) throw PeerFailed();
    stats.bytes_read = bytes_read_;
    stats.bytes_sent = bytes_sent_;
    stats.bytes_received = bytes_received_;
    stats.seconds_read = read_span_.seconds();
    stats.seconds_send = send_span_.seconds();
    stats.seconds_receive = receive_span_.seconds();
    stats.seconds_write = write_span_.seconds();
  }

 private:
  // The abort message to every other node, waited for a bounded time (small: it leaves at once).
  void tell_peers(const std::byte& abort_byte) noexcept {
    try {
      std::vector<Transport::Handle> aborts;
      for (int n = 0; n < transport_.nodes(); ++n) {
        if (n != me_) aborts.push_back(transport_.send(n, abort_tag_, {&abort_byte, 1}));
      }
      const auto deadline = Clock::now() + kAbortSendWait;
      while (!aborts.empty() && Clock::now() < deadline) {
        std::erase_if(aborts, [&](Transport::Handle h) { return transport_.done(h); });
        std::this_thread::sleep_for(kIdleWait);
      }
    } catch (...) {  // the transport is gone too: the launcher ends the job
    }
  }

  // A chunk this node reads: its buffer once taken, whether the read finished, and how many
  // users (sends in flight, this node's own filling) still need the buffer.
  struct OwnChunk {
    size_t chunk;
    Buffer buffer{};
    const std::byte* data = nullptr;  // the chunk's first byte, in `buffer`
    bool read = false;
    int users = 0;
  };
  struct Arrival {
    size_t chunk;
    Buffer buffer;
  };

  // Worker: fills ranks from arrived chunks first (they free receive buffers), else reads the next
  // chunk of this node's own while a read buffer is free.
  void work() {
    std::vector<float> scratch;
    load::Executor::PreadState pread_state;
    for (;;) {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] {
        return stop_ || error_ || !arrivals_.empty() ||
               (next_read_ < mine_.size() && !free_reads_.empty());
      });
      if (stop_ || error_) return;
      try {
        if (!arrivals_.empty()) {
          Arrival arrival = std::move(arrivals_.front());
          arrivals_.pop_front();
          write_span_.begin(Clock::now());
          lock.unlock();
          fill(arrival.chunk, arrival.buffer->data(), scratch);
          lock.lock();
          write_span_.end(Clock::now());
          free_receives_.push_back(std::move(arrival.buffer));
          ++incoming_done_;
        } else {
          const size_t index = next_read_++;
          OwnChunk& own = mine_[index];
          own.buffer = std::move(free_reads_.back());
          free_reads_.pop_back();
          read_span_.begin(Clock::now());
          const ReadChunk& chunk = reads_.chunks[own.chunk];
          if (chunk.nodes == (uint64_t{1} << me_) && direct_fds_.empty()) {
            // Needed here only: read straight into the ranks, as a single-node load does (no
            // transfer buffer, one copy).
            write_span_.begin(Clock::now());
            lock.unlock();
            executor_.read_chunk(chunk.file, chunk.offset, chunk.offset + chunk.bytes, pread_state);
            lock.lock();
            read_span_.end(Clock::now());
            write_span_.end(Clock::now());
            own.read = true;
            release(own);
          } else {
            lock.unlock();
            read(own);
            lock.lock();
            read_span_.end(Clock::now());
            own.read = true;
            own.users =
                std::popcount(chunk.nodes);  // a send to each other node, and this node's fill
            if (chunk.needed_by(me_)) {
              write_span_.begin(Clock::now());
              lock.unlock();
              fill(own.chunk, own.data, scratch);
              lock.lock();
              write_span_.end(Clock::now());
              if (--own.users == 0) release(own);
            }
          }
        }
      } catch (...) {
        if (!lock.owns_lock()) lock.lock();
        if (!error_) error_ = std::current_exception();
      }
      lock.unlock();
      progress_.notify_all();
      work_ready_.notify_all();
    }
  }

  void read(OwnChunk& own) {
    const ReadChunk& chunk = reads_.chunks[own.chunk];
    const SafetensorsFile& file = ckpt_.files()[chunk.file];
    const ErrorDetails where{.file = file.path(), .tensor = plan_.sources[chunk.source].name};
    if (!direct_fds_.empty()) {
      own.data = load::read_direct(direct_fds_[chunk.file].get(), own.buffer->data(), chunk.offset,
                                   chunk.bytes, where);
      return;
    }
    format::pread_exact(file.fd(), {own.buffer->data(), chunk.bytes}, chunk.offset, where);
    own.data = own.buffer->data();
  }

 public:
  // Reads through O_DIRECT (no page cache) for kDirect, and for kAuto when less than half of the
  // files this node reads is cached, as the single-node loader decides; the page cache otherwise.
  // Returns the read path used.
  IoMode choose_io(IoMode io) {
    std::vector<uint32_t> files;
    for (const OwnChunk& own : mine_) {
      const uint32_t f = reads_.chunks[own.chunk].file;
      if (files.empty() || files.back() != f) files.push_back(f);
    }
    const bool required = io == IoMode::kDirect;
    if (io == IoMode::kAuto) {
      std::vector<const SafetensorsFile*> used;
      for (uint32_t f : files) used.push_back(&ckpt_.files()[f]);
      io = load::mostly_cached(used) ? IoMode::kPread : IoMode::kDirect;
    }
    if (io != IoMode::kDirect) return IoMode::kPread;
    // Empty when a file system refuses O_DIRECT: the page cache then.
    direct_fds_ = load::open_direct_files(ckpt_.files(), files, required);
    return direct_fds_.empty() ? IoMode::kPread : IoMode::kDirect;
  }

 private:
  void fill(size_t c, const std::byte* bytes, std::vector<float>& scratch) const {
    const ReadChunk& chunk = reads_.chunks[c];
    executor_.consume_chunk(chunk.file, chunk.offset, {bytes, chunk.bytes}, scratch);
  }

  // Under the mutex: the chunk's buffer is free again.
  void release(OwnChunk& own) {
    free_reads_.push_back(std::move(own.buffer));
    ++mine_done_;
  }

  // The transport loop; returns true when a peer reported a failure.
  bool drive() {
    size_t next_send = 0;
    size_t next_receive = 0;
    std::vector<std::pair<Transport::Handle, size_t>> sends;  // (handle, index in mine_)
    struct Receiving {
      Transport::Handle handle;
      size_t chunk;
      Buffer buffer;
    };
    std::vector<Receiving> receiving;
    for (;;) {
      bool moved = false;
      {
        std::unique_lock lock(mutex_);
        if (error_) return false;
        if (mine_done_ == mine_.size() && incoming_done_ == incoming_.size()) return false;
        // Sends, in chunk order, once read.
        while (next_send < mine_.size() && mine_[next_send].read) {
          OwnChunk& own = mine_[next_send];
          const ReadChunk& chunk = reads_.chunks[own.chunk];
          for (int n = 0; n < transport_.nodes(); ++n) {
            if (n == me_ || !chunk.needed_by(n)) continue;
            send_span_.begin(Clock::now());
            sends.emplace_back(transport_.send(n, data_tag_, {own.data, chunk.bytes}), next_send);
            bytes_sent_ += chunk.bytes;
          }
          ++next_send;
          moved = true;
        }
        // Receives, in chunk order, while a buffer is free.
        while (next_receive < incoming_.size() && !free_receives_.empty()) {
          const ReadChunk& chunk = reads_.chunks[incoming_[next_receive]];
          Buffer buffer = std::move(free_receives_.back());
          free_receives_.pop_back();
          receive_span_.begin(Clock::now());
          const Transport::Handle handle =
              transport_.receive(chunk.reader, data_tag_, {buffer->data(), chunk.bytes});
          receiving.push_back({handle, incoming_[next_receive], std::move(buffer)});
          ++next_receive;
          moved = true;
        }
      }
      bool arrived = false;
      for (auto it = sends.begin(); it != sends.end();) {
        if (!transport_.done(it->first)) {
          ++it;
          continue;
        }
        std::lock_guard lock(mutex_);
        send_span_.end(Clock::now());
        OwnChunk& own = mine_[it->second];
        if (--own.users == 0) release(own);
        it = sends.erase(it);
        moved = arrived = true;
      }
      for (auto it = receiving.begin(); it != receiving.end();) {
        if (!transport_.done(it->handle)) {
          ++it;
          continue;
        }
        std::lock_guard lock(mutex_);
        receive_span_.end(Clock::now());
        bytes_received_ += reads_.chunks[it->chunk].bytes;
        arrivals_.push_back({it->chunk, std::move(it->buffer)});
        it = receiving.erase(it);
        moved = arrived = true;
      }
      if (arrived) work_ready_.notify_all();
      if (transport_.done(abort_handle_)) return true;
      if (!moved) {
        std::unique_lock lock(mutex_);
        progress_.wait_for(lock, kIdleWait);
      }
    }
  }

  const Checkpoint& ckpt_;
  const Plan& plan_;
  const ReadAssignment& reads_;
  Transport& transport_;
  const load::Executor& executor_;
  const int me_;
  const int threads_;
  const int data_tag_;
  const int abort_tag_;
  Transport::Handle abort_handle_ = 0;
  std::vector<Buffer> all_buffers_;         // kept alive for the transport after an error
  std::vector<load::UniqueFd> direct_fds_;  // per file, with O_DIRECT reads; empty: the page cache

  std::mutex mutex_;
  std::condition_variable work_ready_;  // workers: an arrival, a free read buffer, stop
  std::condition_variable progress_;    // the transport thread: a read or a fill finished
  std::vector<OwnChunk> mine_;
  std::vector<size_t> incoming_;
  std::vector<Buffer> free_reads_;
  std::vector<Buffer> free_receives_;
  std::deque<Arrival> arrivals_;
  size_t next_read_ = 0;
  size_t mine_done_ = 0;
  size_t incoming_done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  uint64_t bytes_read_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  StageSpan read_span_, send_span_, receive_span_, write_span_;
};

int next_epoch() {
  static int epoch = 0;  // the same on every node: each node runs the same loads in the same order
  return epoch++;
}

}  // namespace

void fill_striped(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
                  Transport& transport, const LoadOptions& options, std::vector<RankWeights>& ranks,
                  NodeLoadStats& stats) {
  load::Executor executor(ckpt, plan);
  executor.set_cuts(reads.cuts(ckpt.files().size()));
  executor.add_ranks(ranks);
  executor.finish();
  const int threads = options.threads > 0 ? options.threads : default_thread_count();
  StripedLoad load(ckpt, plan, reads, transport, executor, threads, next_epoch());
  stats.io = load.choose_io(options.io);
  load.run(stats);
}

void load_striped(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
                  Transport& transport, const LoadOptions& options, std::vector<RankWeights>& ranks,
                  NodeLoadStats& stats) {
  fill_striped(ckpt, plan, reads, transport, options, ranks, stats);
  const int threads = options.threads > 0 ? options.threads : default_thread_count();
  const auto start = Clock::now();
  load::postprocess_ranks(ckpt, plan, ranks, {}, threads);
  stats.seconds_postprocess = seconds_since(start);
}

}  // namespace shardload::distributed
