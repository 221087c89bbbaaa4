// The weight server's GPU ranks from Python (serve --device cuda): a rank's device allocation
// opened from its CUDA IPC handle, and tensors in it as CUDA DLPack tensors (torch.from_dlpack
// gives torch CUDA tensors sharing the server's memory). python/shardload/client.py uses it.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>

#include "python/bindings.h"
#include "python/tensor.h"
#include "shardload/device.h"
#include "shardload/error.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

// Shared by every tensor taken from it: the mapping closes when the last one goes.
struct Mapping {
  std::shared_ptr<IpcMapping> ipc;

  Tensor tensor(const std::string& name, const std::string& dtype,
                const std::vector<uint64_t>& shape, uint64_t offset) const {
    const std::optional<DType> parsed = parse_dtype(dtype);
    if (!parsed) {
      throw Error(ErrorKind::kInvalidArgument, "unknown dtype", {.tensor = name, .found = dtype});
    }
    Tensor t{ipc, reinterpret_cast<std::byte*>(ipc->address() + offset), *parsed, Shape(shape),
             name};
    if (offset > ipc->size() || t.nbytes() > ipc->size() - offset) {
      throw Error(ErrorKind::kInvalidArgument, "the tensor lies outside the device allocation",
                  {.tensor = name,
                   .expected = fmt::format("at most {} bytes", ipc->size()),
                   .found = fmt::format("{} bytes at {}", t.nbytes(), offset)});
    }
    t.device_type = 2;  // kDLCUDA
    t.device_id = ipc->device();
    return t;
  }
};

}  // namespace

void bind_device(py::module_& m) {
  py::class_<Mapping>(m, "CudaIpcMapping",
                      "Another process's GPU allocation opened from its CUDA IPC handle (no copy)")
      .def(py::init([](const std::string& handle_hex, int device, uint64_t bytes) {
             const std::string why = cuda_unavailable_reason();
             if (!why.empty()) throw Error(ErrorKind::kDevice, "CUDA IPC: " + why);
             return Mapping{
                 std::make_shared<IpcMapping>(device, ipc_handle_from_hex(handle_hex), bytes)};
           }),
           py::arg("handle"), py::arg("device"), py::arg("bytes"))
      .def_property_readonly("device", [](const Mapping& m) { return m.ipc->device(); })
      .def_property_readonly("address", [](const Mapping& m) { return m.ipc->address(); })
      .def_property_readonly("size", [](const Mapping& m) { return m.ipc->size(); })
      .def("tensor", &Mapping::tensor, py::arg("name"), py::arg("dtype"), py::arg("shape"),
           py::arg("offset"), "A CUDA DLPack tensor at byte `offset` of the allocation");
}

}  // namespace shardload::python
