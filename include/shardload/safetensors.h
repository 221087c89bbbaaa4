#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/dtype.h"
#include "shardload/tensor.h"

namespace shardload {

inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One tensor entry of a safetensors header. Offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
  bool operator==(const TensorInfo&) const = default;
};

struct SafetensorsHeader;
namespace format {
bool index_tensor_names(SafetensorsHeader& header);  // the parser's, src/format/header_json.h
}  // namespace format

// A fully validated safetensors header.
struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N, the JSON length declared in the first 8 bytes
  uint64_t data_start = 0;    // 8 + N: file offset of the data section
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;

  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  uint64_t data_bytes() const { return tensors.empty() ? 0 : tensors.back().end; }
  bool operator==(const SafetensorsHeader&) const = default;

 private:
  friend bool format::index_tensor_names(SafetensorsHeader& header);
  // Positions in `tensors`, ordered by name: find() searches it. Filled by the parser; a sorted
  // vector rather than a hash map, so that a 7k-tensor shard costs no per-name allocation here.
  std::vector<uint32_t> by_name_;
};

// Validates the header of a safetensors file of `file_size` bytes whose first bytes are `prefix`
// (at least the 8-byte length and the JSON, when the file has them). As strict as the Rust crate:
// length cap and bounds, UTF-8, JSON object, no duplicates, known dtypes, shapes with overflow-checked
// products, offsets that start at 0 and are contiguous, match shape x dtype and end exactly at the end of the
// file, __metadata__ a string-to-string map. `file` only names the file in errors. Throws Error.
// Never reads past prefix; a prefix shorter than the header is reported as kHeaderLength.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> prefix, uint64_t file_size,
                                           std::string_view file = {});

enum class IoBackend { kPread, kMmap };

// An open, validated safetensors file.
// What an opened file was when it was opened: enough to tell later whether its name still holds
// the bytes that were read (a file replaced, rewritten in place or truncated since).
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t header_xxh3 = 0;  // XXH3-64 of the 8-byte length and the header JSON
  bool operator==(const FileIdentity&) const = default;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path, IoBackend backend = IoBackend::kPread);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  uint64_t file_size() const { return file_size_; }
  int fd() const { return fd_; }
  IoBackend backend() const { return backend_; }
  // Taken when the file was opened, before any tensor byte was read.
  const FileIdentity& identity() const { return identity_; }

  // Reads bytes [offset, offset + dst.size()) of the tensor's data into dst. Throws Error(kIo) with the tensor
  // name on a short read or failure, Error(kInvalidArgument) when the range is outside the tensor.
  void read(const TensorInfo& tensor, uint64_t offset, std::span<std::byte> dst) const;
  void read(const TensorInfo& tensor, std::span<std::byte> dst) const { read(tensor, 0, dst); }

  // Zero-copy view of a tensor's bytes; only with IoBackend::kMmap (Error(kInvalidArgument) otherwise).
  // Valid while this object lives. As with any mapping, a file truncated by someone else while
  // mapped makes access fault (SIGBUS); read() on the pread back end reports that as Error(kIo).
  TensorView view(const TensorInfo& tensor) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  SafetensorsHeader header_;
  uint64_t file_size_ = 0;
  FileIdentity identity_;
  int fd_ = -1;
  IoBackend backend_ = IoBackend::kPread;
  const std::byte* map_ = nullptr;
};

// A tensor to write: name, dtype, shape and its bytes (must be shape_nbytes(shape, dtype) long).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  std::span<const std::byte> data;
};

// Serialises header JSON the way the crate does: tensors ordered by dtype alignment (largest first) then name,
// data laid out in that order, header padded with spaces to a multiple of 8 bytes.
std::string serialize_safetensors_header(const std::vector<TensorToWrite>& tensors,
                                         const std::map<std::string, std::string>& metadata);

// Writes a safetensors file (to a temporary name in the same directory, then renamed). Throws Error.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same header, but no data: each tensor's data must be empty, and the file is extended to the
// length the header declares without writing a byte, so its data section is a hole (zeros when
// read) that takes no disk blocks on file systems with sparse files. Planning and inspecting a
// checkpoint at a real model's scale then need no disk (make-tiny --sparse). Throws Error.
void write_sparse_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace shardload
