#pragma once

#include <liburing.h>

#include <cstdint>
#include <string>
#include <vector>

#include "load/file_access.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tensor.h"

namespace shardload::load {

// O_DIRECT needs the file offset, the length and the buffer aligned to the logical block size; 4096
// covers every common device.
constexpr uint64_t kDirectAlignment = 4096;

// Opens `path` read-only with O_DIRECT. Returns -1 when the file system refuses O_DIRECT (tmpfs,
// some FUSE and network file systems): the caller reads through the page cache instead.
int open_direct(const std::string& path);

// O_DIRECT descriptors of the files `used` names (indices into `files`; the others stay -1), one
// per file of `files`. When one refuses: empty, or with `required` (--io direct) Error(kIo).
std::vector<UniqueFd> open_direct_files(const std::vector<SafetensorsFile>& files,
                                        const std::vector<uint32_t>& used, bool required);

// Reads [offset, offset + bytes) of the O_DIRECT descriptor `fd` synchronously into `buffer`
// (aligned to kDirectAlignment, bytes + 2 x kDirectAlignment long) through the aligned blocks that
// hold it; returns where the first requested byte landed. For a caller that keeps the bytes past
// its next read (DirectReader's slots are reused). Throws Error(kIo) as DirectReader does.
const std::byte* read_direct(int fd, std::byte* buffer, uint64_t offset, uint64_t bytes,
                             const ErrorDetails& where);

// One loader thread's cold reads: up to `depth` file ranges in flight through one io_uring, each
// into its own aligned slot, so the device always has work queued while the thread copies the
// oldest range out. Ranges need not be aligned: each is widened to the alignment and the caller
// gets a pointer to its first requested byte. Where io_uring is unavailable (an old kernel, a
// container whose seccomp profile forbids it) the same calls read synchronously with pread on the
// O_DIRECT descriptor. Memory: depth x (max_bytes + 2 x alignment), allocated once.
class DirectReader {
 public:
  // use_io_uring = false: the synchronous path (tests reach it on purpose).
  DirectReader(unsigned depth, uint64_t max_bytes, bool use_io_uring = true);
  ~DirectReader();  // waits for reads still in flight: the kernel must not write into freed slots
  DirectReader(const DirectReader&) = delete;
  DirectReader& operator=(const DirectReader&) = delete;

  bool full() const { return queued_ == slots_.size(); }
  bool empty() const { return queued_ == 0; }
  bool uses_io_uring() const { return ring_ready_; }

  // Queues a read of [offset, offset + bytes) of the O_DIRECT descriptor `fd` (not full(); bytes <=
  // max_bytes). `tag` comes back from wait_oldest; `where` names the file and tensor in errors.
  void submit(int fd, uint64_t offset, uint64_t bytes, uint64_t tag, const ErrorDetails& where);

  struct Done {
    uint64_t tag;
    const std::byte* data;  // the first requested byte; valid until pop_oldest()
  };
  // Waits until the oldest queued read has all its bytes. Throws Error(kIo) for a failed or short
  // read (the file ended first).
  Done wait_oldest();
  // Frees the oldest slot for the next submit.
  void pop_oldest();

 private:
  struct Slot {
    AlignedBuffer buffer;
    int fd = -1;
    uint64_t aligned_offset = 0;  // file offset of buffer[0]
    uint64_t lead = 0;            // requested offset - aligned_offset
    uint64_t needed = 0;          // lead + requested bytes
    uint64_t length = 0;          // aligned length asked for
    uint64_t got = 0;
    uint64_t tag = 0;
    bool done = false;
    int error = 0;  // errno of a failed read
    ErrorDetails where;
  };

  void start_read(uint32_t slot);  // asks for the slot's bytes from `got` on
  void complete(uint32_t slot, int result);
  void wait_one();  // reaps one completion
  void read_sync(uint32_t slot);

  std::vector<Slot> slots_;
  uint32_t oldest_ = 0;
  uint32_t queued_ = 0;
  uint32_t in_flight_ = 0;  // requests the kernel still holds
  io_uring ring_{};
  bool ring_ready_ = false;
};

}  // namespace shardload::load
