#pragma once

// A rank tensor seen from Python: a pointer into memory shardload owns, kept alive (through `owner`)
// by the tensor and by every DLPack capsule made from it, so that torch or NumPy tensors sharing the
// bytes stay valid after the shardload object that produced them is gone.

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "shardload/dtype.h"
#include "shardload/tensor.h"

namespace shardload::python {

struct Tensor {
  std::shared_ptr<const void> owner;  // whatever holds the bytes (rank buffers, a live model, ...)
  std::byte* data = nullptr;
  DType dtype = DType::kU8;
  Shape shape;
  std::string name;
  // Where `data` points: the host (kDLCPU, 1), or a GPU (kDLCUDA, 2) with its index: the DLPack
  // capsule and __dlpack_device__ say so, and torch.from_dlpack makes a CUDA tensor of it.
  int device_type = 1;
  int device_id = 0;

  uint64_t nbytes() const { return shape_nbytes(shape, dtype); }
};

// A DLPack capsule ("dltensor") sharing the tensor's bytes, on the tensor's device. FP8 is exported as uint8 (DLPack
// has no FP8 code torch 1.13 or NumPy read), BF16 as kDLBfloat.
pybind11::capsule to_dlpack(const Tensor& tensor);

void bind_tensor(pybind11::module_& m);

}  // namespace shardload::python
