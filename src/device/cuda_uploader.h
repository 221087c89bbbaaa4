// The staging ring's Uploader for GPU destinations (device_loader.cc, tensor_destinations.cc).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "device/cuda.h"
#include "device/staging_ring.h"
#include "shardload/error.h"

namespace shardload::device {

// Uploads to device allocations: copies are enqueued on the destination GPU's stream; a marker is
// an event per GPU that got copies since the previous marker.
class CudaUploader : public Uploader {
 public:
  struct Target {
    int device;
    uint64_t address;
    size_t size;
  };
  explicit CudaUploader(std::vector<Target> targets) : targets_(std::move(targets)) {
    for (const Target& t : targets_) {
      if (!streams_.contains(t.device)) streams_[t.device] = cuda::stream_create(t.device);
    }
  }
  ~CudaUploader() override {
    for (auto& [marker, events] : pending_) {
      for (const auto& [dev, event] : events) {
        try {
          cuda::event_wait(dev, event);
        } catch (const Error&) {
        }
      }
    }
    for (const auto& [dev, stream] : streams_) cuda::stream_destroy(dev, stream);
  }
  std::byte* allocate_staging(size_t bytes) override {
    return static_cast<std::byte*>(cuda::host_alloc(bytes));
  }
  void free_staging(std::byte* staging) noexcept override { cuda::host_free(staging); }
  void upload(size_t target, uint64_t offset, const std::byte* src, uint64_t bytes) override {
    const Target& t = targets_.at(target);
    if (offset > t.size || bytes > t.size - offset) {
      throw Error(ErrorKind::kInternal, "an upload runs past its device allocation",
                  {.field = fmt::format("target {}", target),
                   .found = fmt::format("{} bytes at {}", bytes, offset)});
    }
    cuda::copy_h2d_async(t.device, t.address + offset, src, bytes, streams_.at(t.device));
    dirty_[t.device] = true;
  }
  uint64_t mark() override {
    std::vector<std::pair<int, cuda::Event>> events;
    for (auto& [dev, dirty] : dirty_) {
      if (dirty) events.emplace_back(dev, cuda::event_record(dev, streams_.at(dev)));
      dirty = false;
    }
    pending_[++last_] = std::move(events);
    return last_;
  }
  void wait(uint64_t marker) override {
    // Markers complete in order on each stream: waiting for one waits for every earlier one.
    while (!pending_.empty() && pending_.begin()->first <= marker) {
      auto events = std::move(pending_.begin()->second);
      pending_.erase(pending_.begin());
      for (const auto& [dev, event] : events) cuda::event_wait(dev, event);
    }
  }

 private:
  std::vector<Target> targets_;
  std::map<int, cuda::Stream> streams_;
  std::map<int, bool> dirty_;
  std::map<uint64_t, std::vector<std::pair<int, cuda::Event>>> pending_;
  uint64_t last_ = 0;
};

}  // namespace shardload::device
