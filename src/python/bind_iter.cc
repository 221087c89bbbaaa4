// The tensors of one checkpoint file read into one buffer by shardload's parallel pread path, for
// iter_weights (python/shardload/hooks.py): Hugging Face names, unsharded, as the engines'
// load_weights(weights) consume them.
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "core/parallel_for.h"
#include "format/posix_io.h"
#include "python/bindings.h"
#include "python/tensor.h"
#include "shardload/checkpoint.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

constexpr uint64_t kReadChunk = uint64_t{16} << 20;  // one pread; large enough to stream, small enough to spread

// The file's data section is read as it lies on disk, in chunks of file ranges (not per tensor: a
// checkpoint of 20k small tensors would otherwise cost 20k reads), into one buffer its tensors share.
py::list read_file_tensors(const std::shared_ptr<Checkpoint>& ckpt, size_t file_index, int threads) {
  if (file_index >= ckpt->files().size()) throw py::index_error("no file " + std::to_string(file_index));
  const SafetensorsFile& file = ckpt->files()[file_index];
  const std::vector<TensorInfo>& infos = file.header().tensors;
  const uint64_t total = file.header().data_bytes();
  auto buffer = std::make_shared<AlignedBuffer>(std::max<uint64_t>(total, 1));
  {
    py::gil_scoped_release release;
    // One pread per chunk of the data section (the header checked that the tensors tile it).
    const size_t chunks = (total + kReadChunk - 1) / kReadChunk;
    const uint64_t data_start = file.header().data_start;
    parallel_for(chunks, threads, [&](size_t i, int) {
      const uint64_t begin = i * kReadChunk;
      const uint64_t bytes = std::min(kReadChunk, total - begin);
      format::pread_exact(file.fd(), buffer->span().subspan(begin, bytes), data_start + begin,
                          {.file = file.path()});
    });
  }
  py::list out;
  for (const TensorInfo& t : infos) {
    const Checkpoint::Entry* entry = ckpt->find(t.name);
    if (entry == nullptr || entry->file != file_index) continue;  // not the checkpoint's (index)
    out.append(py::make_tuple(t.name, Tensor{buffer, buffer->data() + t.begin, t.dtype, t.shape, t.name}));
  }
  return out;
}

}  // namespace

void bind_iter(py::module_& m) {
  m.def("read_file_tensors", &read_file_tensors, py::arg("checkpoint"), py::arg("file"), py::kw_only(),
        py::arg("threads") = 0, "[(name, Tensor)] of one checkpoint file, read into one shared buffer");
}

}  // namespace shardload::python
