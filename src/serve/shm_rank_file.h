#pragma once

#include <cstdint>
#include <string>

#include "serve/shm_dir.h"
#include "shardload/tensor.h"

namespace shardload::serve {

// One open rank file of the shared-memory directory: its header page mapped (magic, sequence word)
// and the descriptor the tensor area is mapped from. Move-only; closes the descriptor.
class ShmRankFile {
 public:
  ShmRankFile() = default;
  ~ShmRankFile();
  ShmRankFile(ShmRankFile&& other) noexcept;
  ShmRankFile& operator=(ShmRankFile&& other) noexcept;

  // Opens DIR/NAME read-write and maps its header, only when it is a file this user created (a
  // regular file with one link, not a symbolic link); its mode is set again to the directory's.
  // Returns an empty file (valid() false) and says why in `why` when it is absent, someone else's,
  // shorter than the header or unreadable.
  static ShmRankFile open_existing(const ShmDir& dir, const std::string& name, std::string* why);
  // A new file DIR/NAME of kShmHeaderBytes + data_bytes zero bytes with a fresh header (magic, zero
  // words). Any entry of that name is unlinked first, so a process still mapping it keeps the old
  // bytes instead of faulting on a shrunk file. Throws Error(kIo).
  static ShmRankFile create(const ShmDir& dir, const std::string& name, uint64_t data_bytes);
  // A new file of two slots (ServeOptions::double_buffer): kShmHeaderBytes + 2 x shm_slot_bytes(data_bytes).
  static ShmRankFile create_double(const ShmDir& dir, const std::string& name, uint64_t data_bytes);

  bool valid() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return file_bytes_; }
  std::byte* header() { return header_.data(); }
  const std::byte* header() const { return header_.data(); }

  // A shared mapping of the bytes after the header page (the rank's plan buffer). Throws
  // Error(kIo).
  AlignedBuffer map_data() const;
  // A shared mapping of slot `slot` (0 or 1) of a double-buffered file: `data_bytes` from
  // kShmHeaderBytes + slot x shm_slot_bytes(data_bytes). Throws Error(kIo).
  AlignedBuffer map_slot(int slot, uint64_t data_bytes) const;

 private:
  void close();

  int fd_ = -1;
  std::string path_;
  uint64_t file_bytes_ = 0;
  AlignedBuffer header_;
};

}  // namespace shardload::serve
