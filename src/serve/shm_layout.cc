#include "serve/shm_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload {

std::string shm_dir(std::string_view name) {
  const bool allowed_chars = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
  // The name becomes one path component under /dev/shm: anything that could climb out is refused.
  if (name.empty() || name.size() > 100 || !allowed_chars || name == "." || name == "..") {
    throw Error(ErrorKind::kInvalidArgument, "bad shared-memory name",
                {.field = "--name",
                 .expected = "1-100 characters of [A-Za-z0-9._-]",
                 .found = fmt::format("'{}'", name)});
  }
  return fmt::format("/dev/shm/shardload-{}", name);
}

std::string node_shm_dir(std::string_view name, int node, int nodes) {
  const std::string dir = shm_dir(name);
  return nodes <= 1 ? dir : fmt::format("{}.node-{}", dir, node);
}

namespace serve {

// The manifest promises a little-endian word; storing the native integer is only that on such
// hosts.
static_assert(std::endian::native == std::endian::little, "the sequence word is little-endian");

namespace {

uint64_t* header_word(std::byte* header, uint64_t offset) {
  return reinterpret_cast<uint64_t*>(header + offset);
}

uint64_t* sequence_word(std::byte* header) { return header_word(header, kShmSequenceOffset); }

std::atomic_ref<uint64_t> word_at(const std::byte* header, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*header_word(const_cast<std::byte*>(header), offset));
}

}  // namespace

std::string rank_file_name(int rank) { return fmt::format("rank-{}.bin", rank); }

uint64_t load_sequence(const std::byte* header) {
  return std::atomic_ref<uint64_t>(*sequence_word(const_cast<std::byte*>(header)))
      .load(std::memory_order_acquire);
}

void begin_sequence(std::byte* header) {
  std::atomic_ref<uint64_t> word(*sequence_word(header));
  const uint64_t value = word.load(std::memory_order_relaxed);
  if (value % 2 == 0) word.store(value + 1, std::memory_order_seq_cst);
  // The tensor stores that follow must not become visible before the odd word (seqlock writer).
  std::atomic_thread_fence(std::memory_order_release);
}

void end_sequence(std::byte* header) {
  std::atomic_ref<uint64_t> word(*sequence_word(header));
  const uint64_t value = word.load(std::memory_order_relaxed);
  if (value % 2 == 1) word.store(value + 1, std::memory_order_release);
}

uint64_t load_version(const std::byte* header) {
  return word_at(header, kShmVersionOffset).load(std::memory_order_acquire);
}

bool load_update_in_progress(const std::byte* header) {
  return word_at(header, kShmUpdateFlagOffset).load(std::memory_order_acquire) != 0;
}

void set_update_in_progress(std::byte* header) {
  word_at(header, kShmUpdateFlagOffset).store(1, std::memory_order_seq_cst);
  // No tensor byte of the update may become visible before the flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void publish_version(std::byte* header, uint64_t version) {
  word_at(header, kShmVersionOffset).store(version, std::memory_order_release);
  word_at(header, kShmUpdateFlagOffset).store(0, std::memory_order_release);
}

void init_header(std::byte* header) {
  std::memcpy(header, kShmMagic.data(), kShmMagic.size());
  for (uint64_t offset : {kShmSequenceOffset, kShmVersionOffset, kShmUpdateFlagOffset, kShmActiveSlotOffset}) {
    word_at(header, offset).store(0, std::memory_order_release);
  }
}

uint64_t load_active_slot(const std::byte* header) {
  return word_at(header, kShmActiveSlotOffset).load(std::memory_order_acquire);
}

void store_active_slot(std::byte* header, uint64_t offset) {
  word_at(header, kShmActiveSlotOffset).store(offset, std::memory_order_release);
}

bool has_magic(const std::byte* header) {
  return std::memcmp(header, kShmMagic.data(), kShmMagic.size()) == 0;
}

}  // namespace serve
}  // namespace shardload
