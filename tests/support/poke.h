#pragma once

// Damages one value of a generated checkpoint in place, for tests of what a load or an update
// does with a bad scale.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "shardload/checkpoint.h"
#include "shardload/convert.h"

namespace shardload::testing {

// Overwrites element `index` of checkpoint tensor `tensor` of `model` in place with `value` in the
// tensor's dtype, which must be `dtype` (a damaged scale); returns the file that holds it.
inline std::string poke_value(const std::string& model, const std::string& tensor, uint64_t index,
                              float value, DType dtype) {
  const Checkpoint ckpt = Checkpoint::open(model);
  const Checkpoint::Entry& entry = ckpt.at(tensor);
  const SafetensorsFile& file = ckpt.files()[entry.file];
  EXPECT_EQ(entry.info->dtype, dtype) << tensor;
  const uint64_t size = dtype_bits(dtype) / 8;
  EXPECT_LT(index * size, entry.info->nbytes()) << tensor;
  std::byte bytes[4];
  convert(DType::kF32, &value, dtype, bytes, 1);
  const int fd = ::open(file.path().c_str(), O_WRONLY);
  EXPECT_GE(fd, 0) << file.path();
  const off_t at = static_cast<off_t>(file.header().data_start + entry.info->begin + index * size);
  EXPECT_EQ(::pwrite(fd, bytes, size, at), static_cast<ssize_t>(size));
  ::close(fd);
  return file.path();
}

// The same for a float32 tensor.
inline std::string poke_float(const std::string& model, const std::string& tensor, uint64_t index,
                              float value) {
  return poke_value(model, tensor, index, value, DType::kF32);
}

}  // namespace shardload::testing
