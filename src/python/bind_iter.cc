// The tensors of one checkpoint file read into one buffer by shardload's parallel pread path, for
// iter_weights (python/shardload/hooks.py): Hugging Face names, unsharded, as the engines'
// load_weights(weights) consume them.
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "core/parallel_for.h"
#include "python/bindings.h"
#include "python/tensor.h"
#include "shardload/checkpoint.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

constexpr uint64_t kReadChunk = uint64_t{16} << 20;  // one pread; large enough to stream, small enough to spread

struct Chunk {
  const TensorInfo* tensor;
  uint64_t offset;  // within the tensor
  uint64_t bytes;
  uint64_t dst;     // within the buffer
};

py::list read_file_tensors(const std::shared_ptr<Checkpoint>& ckpt, size_t file_index, int threads) {
  if (file_index >= ckpt->files().size()) throw py::index_error("no file " + std::to_string(file_index));
  const SafetensorsFile& file = ckpt->files()[file_index];
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& info : file.header().tensors) {
    const Checkpoint::Entry* entry = ckpt->find(info.name);
    if (entry != nullptr && entry->file == file_index) tensors.push_back(&info);
  }
  std::vector<Chunk> chunks;
  std::vector<uint64_t> offsets;  // of each tensor in the buffer
  uint64_t total = 0;
  for (const TensorInfo* t : tensors) {
    offsets.push_back(total);
    for (uint64_t at = 0; at < t->nbytes(); at += kReadChunk) {
      chunks.push_back({t, at, std::min(kReadChunk, t->nbytes() - at), total + at});
    }
    total += (t->nbytes() + 63) / 64 * 64;  // 64-byte aligned tensors, for vectorized consumers
  }
  auto buffer = std::make_shared<AlignedBuffer>(std::max<uint64_t>(total, 1));
  {
    py::gil_scoped_release release;
    parallel_for(chunks.size(), threads, [&](size_t i, int) {
      const Chunk& c = chunks[i];
      file.read(*c.tensor, c.offset, buffer->span().subspan(c.dst, c.bytes));
    });
  }
  py::list out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = *tensors[i];
    out.append(py::make_tuple(t.name, Tensor{buffer, buffer->data() + offsets[i], t.dtype, t.shape, t.name}));
  }
  return out;
}

}  // namespace

void bind_iter(py::module_& m) {
  m.def("read_file_tensors", &read_file_tensors, py::arg("checkpoint"), py::arg("file"), py::kw_only(),
        py::arg("threads") = 0, "[(name, Tensor)] of one checkpoint file, read into one shared buffer");
}

}  // namespace shardload::python
