// A rank file is taken only if it holds what the export's layout plans for its rank: each tensor
// by name, dtype and shape, none missing, none more. Its metadata alone would pass a file of an
// export with more experts, or one whose tensors were dropped, added or rewritten.
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "core/shape_text.h"
#include "export/export_checks.h"
#include "shardload/error.h"

namespace shardload {
namespace {

std::string described(DType dtype, const Shape& shape) {
  return fmt::format("{} {}", dtype_name(dtype), shape_text(shape));
}

}  // namespace

void check_rank_tensors(int rank, const std::vector<EngineTensor>& expected,
                        const std::vector<const SafetensorsFile*>& files) {
  std::unordered_map<std::string_view, const EngineTensor*> planned;
  for (const EngineTensor& tensor : expected) planned.emplace(tensor.name, &tensor);
  std::unordered_map<std::string_view, const SafetensorsFile*> found;
  for (const SafetensorsFile* file : files) {
    for (const TensorInfo& info : file->header().tensors) {
      const auto it = planned.find(info.name);
      if (it == planned.end()) {
        throw Error(ErrorKind::kUnknownTensor,
                    fmt::format("not a tensor of rank {} in the export's layout", rank),
                    {.file = file->path(),
                     .tensor = info.name,
                     .expected = "only the tensors config.json and shardload.json plan",
                     .found = described(info.dtype, info.shape)});
      }
      const auto [seen, first] = found.emplace(info.name, file);
      if (!first) {
        throw Error(ErrorKind::kDuplicateTensor, "the tensor is in two files of the rank",
                    {.file = file->path(),
                     .tensor = info.name,
                     .expected = "each tensor in one file",
                     .found = "also in " + seen->second->path()});
      }
      const EngineTensor& param = *it->second;
      if (info.dtype != param.dtype) {
        throw Error(ErrorKind::kUnsupportedDtype, "dtype disagrees with the export's layout",
                    {.file = file->path(),
                     .tensor = info.name,
                     .field = "dtype",
                     .expected = std::string(dtype_name(param.dtype)),
                     .found = std::string(dtype_name(info.dtype))});
      }
      if (info.shape != param.shape) {
        throw Error(ErrorKind::kShapeMismatch, "shape disagrees with the export's layout",
                    {.file = file->path(),
                     .tensor = info.name,
                     .field = "shape",
                     .expected = shape_text(param.shape),
                     .found = shape_text(info.shape)});
      }
    }
  }
  for (const EngineTensor& param : expected) {
    if (found.contains(param.name)) continue;
    throw Error(ErrorKind::kTensorNotFound,
                fmt::format("missing from the files of rank {}", rank),
                {.file = files.empty() ? std::string() : files.front()->path(),
                 .tensor = param.name,
                 .expected = described(param.dtype, param.shape),
                 .found = "nothing"});
  }
  // A tensor the plan takes only when the checkpoint had it, gone from every rank file alike.
  for (const SafetensorsFile* file : files) {
    const auto count = file->header().metadata.find("tensor_count");
    const std::string held = std::to_string(file->header().tensors.size());
    if (count == file->header().metadata.end() || count->second == held) continue;
    throw Error(ErrorKind::kInvalidMetadata,
                "the file holds another number of tensors than it was written with",
                {.file = file->path(),
                 .field = "tensor_count",
                 .expected = count->second.size() <= 20 ? count->second : "a number",
                 .found = held});
  }
}

}  // namespace shardload
