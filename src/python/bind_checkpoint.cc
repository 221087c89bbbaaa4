// Opening and inspecting a checkpoint, and planning a layout, from Python.
#include <pybind11/stl.h>

#include <optional>

#include <memory>

#include "python/bindings.h"
#include "python/path_arg.h"
#include "python/json_value.h"
#include "python/layout_kwargs.h"
#include "shardload/checkpoint.h"
#include "shardload/plan.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

py::list tensor_list(const Checkpoint& c) {
  py::list out;
  for (const std::string& name : c.tensor_names()) {
    const Checkpoint::Entry& e = c.at(name);
    py::dict t;
    t["name"] = name;
    t["dtype"] = std::string(dtype_name(e.info->dtype));
    t["shape"] = py::cast(e.info->shape);
    t["file"] = c.files()[e.file].path();
    t["nbytes"] = e.info->nbytes();
    out.append(std::move(t));
  }
  return out;
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<Checkpoint, std::shared_ptr<Checkpoint>>(m, "Checkpoint",
                                                      "A Hugging Face checkpoint, every header validated")
      .def(py::init([](const py::object& path_object) {
             const std::string path = path_arg(path_object);
             py::gil_scoped_release release;
             return std::make_shared<Checkpoint>(Checkpoint::open(path));
           }),
           py::arg("path"))
      .def_property_readonly("path", &Checkpoint::path)
      .def_property_readonly("config",
                             [](const Checkpoint& c) { return c.has_config() ? to_python(c.config()) : py::none(); })
      .def_property_readonly("files",
                             [](const Checkpoint& c) {
                               std::vector<std::string> out;
                               for (const SafetensorsFile& f : c.files()) out.push_back(f.path());
                               return out;
                             })
      .def_property_readonly("tensors", &tensor_list, "Every tensor: name, dtype, shape, file, nbytes")
      .def_property_readonly("warnings", &Checkpoint::warnings)
      .def("__len__", [](const Checkpoint& c) { return c.tensor_names().size(); })
      .def("__repr__", [](const Checkpoint& c) {
        return "shardload.Checkpoint('" + c.path() + "', " + std::to_string(c.tensor_names().size()) + " tensors)";
      });

  m.def(
      "resolve_model_path",
      [](const py::object& model, const std::optional<std::string>& revision) {
        return resolve_model_path(path_arg(model), revision.value_or(""));
      },
      py::arg("model"), py::kw_only(), py::arg("revision") = py::none(),
      "The folder a model argument names: itself, or a Hugging Face model id's snapshot in the "
      "local cache (revision: a branch, tag or commit hash there; default main); pass it to load, "
      "plan, export or serve");

  m.def(
      "plan",
      [](const py::object& model_path, bool pieces, const py::kwargs& layout) {
        const std::string model = path_arg(model_path);
        const ParallelConfig parallel = layout_from_kwargs(layout);
        nlohmann::json out;
        {
          py::gil_scoped_release release;
          out = make_plan(Checkpoint::open(model), parallel).to_json(pieces);
        }
        return to_python(out);
      },
      py::arg("model"), py::kw_only(), py::arg("pieces") = true,
      "The plan of a layout as `shardload plan --json` prints it, as dicts");
}

}  // namespace shardload::python
