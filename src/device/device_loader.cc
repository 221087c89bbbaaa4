// Ranks into GPU memory through the staging ring (staging_ring.h) with a CUDA uploader: one stream
// per GPU, page-locked staging buffers, an event per GPU marking each window's copies.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <utility>

#include "core/seconds_since.h"
#include "device/cuda.h"
#include "device/cuda_uploader.h"
#include "device/staging_ring.h"
#include "shardload/device.h"
#include "shardload/error.h"

namespace shardload {

DeviceKind parse_device_kind(std::string_view text) {
  if (text == "cpu") return DeviceKind::kCpu;
  if (text == "cuda") return DeviceKind::kCuda;
  throw Error(ErrorKind::kInvalidArgument, "unknown device",
              {.field = "device", .expected = "cpu or cuda", .found = std::string(text)});
}

std::string cuda_unavailable_reason() { return device::cuda::unavailable_reason(); }

int cuda_device_count() { return device::cuda::device_count(); }

std::vector<int> parse_device_map(std::string_view text) {
  std::vector<int> out;
  if (text.empty()) return out;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    const std::string_view item =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    int value = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value < 0) {
      throw Error(
          ErrorKind::kInvalidArgument, "a device map is a comma-separated list of GPU indices",
          {.field = "--device-map", .expected = "e.g. 0,0,1,1", .found = std::string(text)});
    }
    out.push_back(value);
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return out;
}

std::vector<int> assign_devices(const std::vector<int>& ranks, int gpus,
                                const std::vector<int>& map) {
  if (gpus <= 0) throw Error(ErrorKind::kDevice, "no GPU to load onto");
  std::vector<int> out;
  if (map.empty()) {
    for (int r : ranks) out.push_back(r % gpus);
    return out;
  }
  if (map.size() != ranks.size()) {
    throw Error(ErrorKind::kInvalidArgument, "the device map needs one GPU per rank loaded",
                {.field = "--device-map",
                 .expected = fmt::format("{} entries", ranks.size()),
                 .found = fmt::format("{}", map.size())});
  }
  for (int d : map) {
    if (d >= gpus) {
      throw Error(ErrorKind::kInvalidArgument, "the device map names a GPU that is not visible",
                  {.field = "--device-map",
                   .expected = fmt::format("0 to {}", gpus - 1),
                   .found = fmt::format("{}", d)});
    }
  }
  return map;
}

DeviceBuffer::DeviceBuffer(int device, size_t size)
    : device_(device), address_(device::cuda::alloc(device, size)), size_(size) {}

DeviceBuffer::~DeviceBuffer() {
  if (address_ != 0) device::cuda::free(device_, address_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, -1)),
      address_(std::exchange(other.address_, 0)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (address_ != 0) device::cuda::free(device_, address_);
    device_ = std::exchange(other.device_, -1);
    address_ = std::exchange(other.address_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

namespace {
void check_range(const DeviceBuffer& b, uint64_t offset, size_t bytes) {
  if (offset > b.size() || bytes > b.size() - offset) {
    throw Error(ErrorKind::kInvalidArgument, "the range lies outside the device buffer",
                {.expected = fmt::format("at most {} bytes", b.size()),
                 .found = fmt::format("{} bytes at {}", bytes, offset)});
  }
}
}  // namespace

void DeviceBuffer::copy_to_host(uint64_t offset, std::span<std::byte> out) const {
  check_range(*this, offset, out.size());
  if (!out.empty()) device::cuda::copy_d2h(device_, out.data(), address_ + offset, out.size());
}

void DeviceBuffer::copy_from_host(uint64_t offset, std::span<const std::byte> in) {
  check_range(*this, offset, in.size());
  if (!in.empty()) device::cuda::copy_h2d(device_, address_ + offset, in.data(), in.size());
}

std::array<char, 64> DeviceBuffer::ipc_handle() const {
  return device::cuda::ipc_handle(device_, address_);
}

IpcMapping::IpcMapping(int device, const std::array<char, 64>& handle, size_t bytes)
    : device_(device), address_(device::cuda::ipc_open(device, handle)), size_(bytes) {}

IpcMapping::~IpcMapping() { device::cuda::ipc_close(device_, address_); }

std::array<char, 64> ipc_handle_from_hex(std::string_view hex) {
  std::array<char, 64> out{};
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  bool ok = hex.size() == 2 * out.size();
  for (size_t i = 0; ok && i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]);
    const int lo = digit(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  if (!ok) {
    throw Error(ErrorKind::kInvalidArgument, "not a CUDA IPC handle",
                {.field = "ipc_handle",
                 .expected = "128 hex digits",
                 .found = fmt::format("{} characters", hex.size())});
  }
  return out;
}

std::string ipc_handle_hex(const std::array<char, 64>& handle) {
  std::string hex;
  for (char c : handle) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return hex;
}

std::vector<DeviceRankWeights> load_ranks_to_device(const Checkpoint& ckpt, const Plan& plan,
                                                    const LoadOptions& options,
                                                    const DeviceLoadOptions& device,
                                                    LoadStats* stats,
                                                    DeviceLoadStats* device_stats) {
  std::vector<int> ranks = options.ranks;
  if (ranks.empty()) {
    for (const RankPlan& rank : plan.ranks) ranks.push_back(rank.rank);
  }
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(plan.ranks.size())) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("rank {} is outside the layout", r));
    }
  }
  const std::vector<int> devices = assign_devices(ranks, cuda_device_count(), device.device_map);
  auto start = std::chrono::steady_clock::now();
  std::vector<DeviceRankWeights> out;
  std::vector<device::CudaUploader::Target> targets;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const uint64_t bytes = plan.ranks[static_cast<size_t>(ranks[i])].bytes;
    DeviceRankWeights& w = out.emplace_back();
    w.rank = ranks[i];
    w.buffer = DeviceBuffer(devices[i], bytes);
    targets.push_back({devices[i], w.buffer.address(), w.buffer.size()});
  }
  const double allocate = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const device::RingOptions ring = device::ring_options(options, device.window_bytes, device.depth);
  device::RingStats ring_stats;
  std::vector<std::vector<uint8_t>> processed;
  {
    device::CudaUploader uploader(std::move(targets));
    device::load_through_ring(ckpt, plan, ranks, uploader, ring, processed, &ring_stats);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].processed = std::move(processed[i]);
  if (stats != nullptr) {
    stats->seconds_allocate = allocate;
    stats->seconds_copy = seconds_since(start);  // reads, post-processing and uploads overlap
    stats->seconds_postprocess = ring_stats.seconds_postprocess;
    stats->bytes_read = ring_stats.bytes_read;
    stats->bytes_written = ring_stats.bytes_uploaded;
    stats->io = ring_stats.io;
    stats->read_requests = ring_stats.read_requests;
  }
  if (device_stats != nullptr) {
    device_stats->windows = ring_stats.windows;
    device_stats->staging_bytes = ring_stats.staging_bytes;
    device_stats->seconds_fill = ring_stats.seconds_fill;
    device_stats->seconds_postprocess = ring_stats.seconds_postprocess;
    device_stats->seconds_wait = ring_stats.seconds_wait;
  }
  return out;
}

void load_into_device(const Checkpoint& ckpt, const Plan& plan,
                      std::vector<DeviceRankWeights>& ranks, const std::vector<bool>& modules,
                      const LoadOptions& options, const DeviceLoadOptions& device,
                      LoadStats* stats) {
  std::vector<int> ids;
  std::vector<device::CudaUploader::Target> targets;
  std::vector<std::vector<uint8_t>> processed;
  for (const DeviceRankWeights& w : ranks) {
    if (w.rank < 0 || w.rank >= static_cast<int>(plan.ranks.size())) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("rank {} is outside the layout", w.rank));
    }
    const uint64_t bytes = plan.ranks[static_cast<size_t>(w.rank)].bytes;
    if (w.buffer.size() != bytes) {
      throw Error(ErrorKind::kInvalidArgument, "the rank buffer does not fit the plan",
                  {.field = fmt::format("rank {}", w.rank),
                   .expected = fmt::format("{} bytes", bytes),
                   .found = fmt::format("{} bytes", w.buffer.size())});
    }
    ids.push_back(w.rank);
    targets.push_back({w.buffer.device(), w.buffer.address(), w.buffer.size()});
    processed.push_back(w.processed);
  }
  const auto start = std::chrono::steady_clock::now();
  device::RingOptions ring = device::ring_options(options, device.window_bytes, device.depth);
  ring.modules = modules;
  device::RingStats ring_stats;
  {
    device::CudaUploader uploader(std::move(targets));
    device::load_through_ring(ckpt, plan, ids, uploader, ring, processed, &ring_stats);
  }
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i].processed = std::move(processed[i]);
  if (stats != nullptr) {
    stats->seconds_copy = seconds_since(start);
    stats->seconds_postprocess = ring_stats.seconds_postprocess;
    stats->bytes_read = ring_stats.bytes_read;
    stats->bytes_written = ring_stats.bytes_uploaded;
    stats->io = ring_stats.io;
    stats->read_requests = ring_stats.read_requests;
  }
}

std::vector<DeviceBuffer> upload_buffers(const std::vector<std::span<const std::byte>>& buffers,
                                         const std::vector<int>& devices) {
  if (devices.size() != buffers.size()) {
    throw Error(ErrorKind::kInvalidArgument, "one device per buffer",
                {.expected = fmt::format("{}", buffers.size()),
                 .found = fmt::format("{}", devices.size())});
  }
  std::vector<DeviceBuffer> out;
  for (size_t i = 0; i < buffers.size(); ++i) out.emplace_back(devices[i], buffers[i].size());
  copy_to_devices(buffers, out);
  return out;
}

void copy_to_devices(const std::vector<std::span<const std::byte>>& from,
                     std::vector<DeviceBuffer>& to) {
  if (from.size() != to.size()) {
    throw Error(
        ErrorKind::kInvalidArgument, "one device buffer per host buffer",
        {.expected = fmt::format("{}", from.size()), .found = fmt::format("{}", to.size())});
  }
  std::vector<device::CudaUploader::Target> targets;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].size() > to[i].size()) {
      throw Error(ErrorKind::kInvalidArgument, "the bytes do not fit the device buffer",
                  {.expected = fmt::format("at most {} bytes", to[i].size()),
                   .found = fmt::format("{} bytes", from[i].size())});
    }
    targets.push_back({to[i].device(), to[i].address(), to[i].size()});
  }
  if (targets.empty()) return;
  // Pageable host memory: each chunk is copied into a pinned buffer and uploaded from there while
  // the next chunk is copied (a pageable cuMemcpy would stage through the driver's own small
  // buffers, synchronously).
  constexpr uint64_t kChunk = uint64_t{64} << 20;
  constexpr size_t kDepth = 3;
  device::CudaUploader uploader(std::move(targets));
  std::vector<std::byte*> staging;
  std::vector<uint64_t> markers(kDepth, 0);
  struct Release {
    device::CudaUploader& u;
    std::vector<std::byte*>& s;
    std::vector<uint64_t>& m;
    ~Release() {
      for (uint64_t marker : m) {
        try {
          if (marker != 0) u.wait(marker);
        } catch (const Error&) {
        }
      }
      for (std::byte* b : s) u.free_staging(b);
    }
  } release{uploader, staging, markers};
  for (size_t i = 0; i < kDepth; ++i) staging.push_back(uploader.allocate_staging(kChunk));
  size_t slot = 0;
  for (size_t i = 0; i < from.size(); ++i) {
    for (uint64_t at = 0; at < from[i].size(); at += kChunk) {
      const uint64_t n = std::min<uint64_t>(kChunk, from[i].size() - at);
      if (markers[slot] != 0) uploader.wait(std::exchange(markers[slot], 0));
      std::memcpy(staging[slot], from[i].data() + at, n);
      uploader.upload(i, at, staging[slot], n);
      markers[slot] = uploader.mark();
      slot = (slot + 1) % kDepth;
    }
  }
  for (uint64_t& m : markers) {
    if (m != 0) uploader.wait(std::exchange(m, 0));
  }
}

}  // namespace shardload
