#pragma once

// Damages one value of a generated checkpoint in place, for tests of what a load or an update
// does with a bad scale.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "shardload/checkpoint.h"

namespace shardload::testing {

// Overwrites element `index` of float32 checkpoint tensor `tensor` of `model` in place (a damaged
// scale); returns the file that holds it.
inline std::string poke_float(const std::string& model, const std::string& tensor, uint64_t index,
                              float value) {
  const Checkpoint ckpt = Checkpoint::open(model);
  const Checkpoint::Entry& entry = ckpt.at(tensor);
  const SafetensorsFile& file = ckpt.files()[entry.file];
  EXPECT_EQ(entry.info->dtype, DType::kF32) << tensor;
  EXPECT_LT(index * 4, entry.info->nbytes()) << tensor;
  const int fd = ::open(file.path().c_str(), O_WRONLY);
  EXPECT_GE(fd, 0) << file.path();
  const off_t at = static_cast<off_t>(file.header().data_start + entry.info->begin + index * 4);
  EXPECT_EQ(::pwrite(fd, &value, 4, at), 4);
  ::close(fd);
  return file.path();
}

}  // namespace shardload::testing
