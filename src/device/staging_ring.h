// Loading ranks into memory the loader cannot write directly (a GPU's), through a ring of staging
// buffers in host memory: each window of whole modules, for every rank at once, is read into a
// staging buffer (the executor's jobs, with their dtype casts), zero-filled where no piece lands,
// post-processed (FP8), then handed to an Uploader that copies it, asynchronously, to each rank's
// destination at the window's offsets, while the next window is read into the next buffer. The
// ring is generic over the Uploader: tests run it with a host-memory one (HostUploader) on every
// machine, the device loader with the CUDA one. Design: docs/gpu.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload::device {

// Where windows go. upload() only enqueues; mark()/wait() tell when the copies enqueued are done,
// so that a staging buffer is refilled only after its previous window left it.
class Uploader {
 public:
  virtual ~Uploader() = default;
  // Host memory uploads read from (page-locked for a GPU), `bytes` long; freed with free_staging.
  virtual std::byte* allocate_staging(size_t bytes) = 0;
  virtual void free_staging(std::byte* staging) noexcept = 0;
  // Copies `bytes` from `src` to byte `offset` of destination `target` (an index into the ranks
  // being loaded), later: `src` must stay unchanged until a mark() taken after this call is waited.
  virtual void upload(size_t target, uint64_t offset, const std::byte* src, uint64_t bytes) = 0;
  // A marker for every upload enqueued so far.
  virtual uint64_t mark() = 0;
  // Returns once every upload before `marker` is done (throws what a copy failed with).
  virtual void wait(uint64_t marker) = 0;
};

// One rank's share of a window: params [param_begin, param_end) of the rank, its bytes [begin,
// end), at staging_offset in the window's staging buffer.
struct WindowSlice {
  size_t target = 0;  // index into the ranks being loaded
  size_t param_begin = 0;
  size_t param_end = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t staging_offset = 0;
};

// Modules [module_begin, module_end) of every rank: the unit read, post-processed and uploaded.
struct Window {
  uint32_t module_begin = 0;
  uint32_t module_end = 0;
  std::vector<WindowSlice> slices;
  uint64_t bytes = 0;  // staging bytes (slices packed at 256-byte alignment)
};

// Windows covering every byte of each rank of `ranks` once: runs of whole modules (post-processing
// needs a module's every tensor), as many as fit `window_bytes` over all ranks, at least one. A
// module bigger than that is a window alone. Throws Error(kInternal) when a rank's params do not
// lie in module order at increasing offsets (what the planner guarantees).
// With `selected` (one flag per module of the plan), only the selected modules' bytes: a window
// never spans a module that is not selected, whose bytes the destination keeps.
std::vector<Window> plan_windows(const Plan& plan, const std::vector<int>& ranks,
                                 uint64_t window_bytes, const std::vector<bool>& selected = {});

struct RingOptions {
  uint64_t window_bytes = uint64_t{128} << 20;
  int depth = 3;  // staging buffers
  int threads = 0;
  IoMode io = IoMode::kAuto;
  std::function<void(uint64_t done, uint64_t total)> progress;  // rank bytes uploaded (enqueued)
  // Modules to load (empty: all): a partial load in place, as load_into does on the host; the
  // destinations keep every other module's bytes.
  std::vector<bool> modules;
};

// The ring's options of a load: its threads, read path and progress, and the staging geometry.
inline RingOptions ring_options(const LoadOptions& load, uint64_t window_bytes, int depth) {
  RingOptions ring;
  ring.window_bytes = window_bytes;
  ring.depth = depth;
  ring.threads = load.threads;
  ring.io = load.io;
  ring.progress = load.progress;
  return ring;
}

struct RingStats {
  uint64_t windows = 0;
  uint64_t staging_bytes = 0;   // the ring's host memory: depth x the largest window
  uint64_t bytes_read = 0;      // checkpoint bytes read
  uint64_t bytes_uploaded = 0;  // rank bytes uploaded
  double seconds_fill = 0;      // reading and converting into staging
  double seconds_postprocess = 0;
  double seconds_wait = 0;    // waiting for a staging buffer to be free, and the last uploads
  IoMode io = IoMode::kAuto;  // the read path (kAuto resolved once, for the whole load)
  uint64_t read_requests = 0;
};

// Loads every byte of each rank of `ranks` (plan rank indices) into upload target i (the i-th of
// `ranks`), post-processed, each module marked in processed[i] (resized to the plan's modules).
// With options.modules, only those modules' bytes, in place; processed[i] keeps the other flags.
// Returns after the last upload is done.
void load_through_ring(const Checkpoint& ckpt, const Plan& plan, const std::vector<int>& ranks,
                       Uploader& uploader, const RingOptions& options,
                       std::vector<std::vector<uint8_t>>& processed, RingStats* stats = nullptr);

// An Uploader into host buffers, with a thread doing the copies: what the tests run the ring with,
// the same code path as a GPU's, including staging reuse only after the copies are done.
class HostUploader : public Uploader {
 public:
  explicit HostUploader(std::vector<std::span<std::byte>> targets);
  ~HostUploader() override;
  std::byte* allocate_staging(size_t bytes) override;
  void free_staging(std::byte* staging) noexcept override;
  void upload(size_t target, uint64_t offset, const std::byte* src, uint64_t bytes) override;
  uint64_t mark() override;
  void wait(uint64_t marker) override;

 private:
  struct State;
  State* state_;
};

}  // namespace shardload::device
