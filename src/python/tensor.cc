#include "python/tensor.h"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <vector>

namespace py = pybind11;

namespace shardload::python {
namespace {

DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kBool:  // DLPack 0.6 has no bool code
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF8E8M0:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ: return {kDLUInt, 8, 1};
    case DType::kI8: return {kDLInt, 8, 1};
    case DType::kI16: return {kDLInt, 16, 1};
    case DType::kU16: return {kDLUInt, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kU32: return {kDLUInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU64: return {kDLUInt, 64, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF64: return {kDLFloat, 64, 1};
    case DType::kC64: return {kDLComplex, 64, 1};
    default: break;
  }
  throw py::type_error("shardload dtype " + std::string(dtype_name(dtype)) + " has no DLPack equivalent");
}

// What a DLManagedTensor owns: the shape and strides arrays it points to and a reference to the bytes.
struct Managed {
  DLManagedTensor dl{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::shared_ptr<const void> owner;
};

void delete_managed(DLManagedTensor* dl) { delete static_cast<Managed*>(dl->manager_ctx); }

// A capsule nobody consumed still owns its tensor; a consumer renames it "used_dltensor" and calls the
// deleter itself when done.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;
  auto* dl = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (dl != nullptr && dl->deleter != nullptr) dl->deleter(dl);
}

}  // namespace

py::capsule to_dlpack(const Tensor& tensor) {
  auto managed = std::make_unique<Managed>();
  managed->owner = tensor.owner;
  managed->shape.assign(tensor.shape.begin(), tensor.shape.end());
  managed->strides.resize(tensor.shape.size());
  int64_t stride = 1;
  for (size_t i = tensor.shape.size(); i-- > 0;) {
    managed->strides[i] = stride;
    stride *= static_cast<int64_t>(tensor.shape[i]);
  }
  DLTensor& t = managed->dl.dl_tensor;
  t.data = tensor.data;
  t.device = {static_cast<DLDeviceType>(tensor.device_type), tensor.device_id};
  t.ndim = static_cast<int32_t>(tensor.shape.size());
  t.dtype = dl_dtype(tensor.dtype);
  t.shape = managed->shape.data();
  t.strides = managed->strides.data();
  t.byte_offset = 0;
  managed->dl.manager_ctx = managed.get();
  managed->dl.deleter = delete_managed;
  DLManagedTensor* dl = &managed.release()->dl;
  PyObject* capsule = PyCapsule_New(dl, "dltensor", capsule_destructor);
  if (capsule == nullptr) {
    dl->deleter(dl);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor",
                     "A rank tensor in shardload's memory; share it with torch.from_dlpack or numpy.from_dlpack")
      .def_readonly("name", &Tensor::name)
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype)); })
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape)); })
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data); })
      .def(
          "__dlpack__",
          [](const Tensor& t, py::object stream) {
            // A GPU tensor's bytes are complete before shardload hands it out (the uploads were
            // waited for): any consumer stream may read them, so a stream needs no event.
            if (!stream.is_none() && t.device_type == kDLCPU)
              throw py::value_error("a CPU tensor takes no stream");
            return to_dlpack(t);
          },
          py::arg("stream") = py::none())
      .def(
          "reinterpret",
          [](const Tensor& t, const std::string& dtype) {
            const std::optional<DType> to = parse_dtype(dtype);
            if (!to || dtype_bits(*to) != dtype_bits(t.dtype)) {
              throw py::value_error("cannot view " + std::string(dtype_name(t.dtype)) + " as " + dtype +
                                    " (a safetensors dtype of the same width is needed)");
            }
            Tensor out = t;
            out.dtype = *to;
            return out;
          },
          py::arg("dtype"), "The same bytes as another dtype of the same width (e.g. BF16 as U16)")
      .def("__dlpack_device__", [](const Tensor& t) { return py::make_tuple(t.device_type, t.device_id); })
      .def_property_readonly("device",
                             [](const Tensor& t) {
                               return t.device_type == kDLCUDA ? "cuda:" + std::to_string(t.device_id)
                                                               : std::string("cpu");
                             })
      .def("__repr__", [](const Tensor& t) {
        std::string shape;
        for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
        return "shardload.Tensor('" + t.name + "', " + std::string(dtype_name(t.dtype)) + ", [" + shape + "])";
      });
}

}  // namespace shardload::python
