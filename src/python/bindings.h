#pragma once

#include <pybind11/pybind11.h>

namespace shardload::python {

// The extension's parts (module.cc calls each once).
void bind_checkpoint(pybind11::module_& m);
void bind_load(pybind11::module_& m);
void bind_live(pybind11::module_& m);
void bind_export(pybind11::module_& m);
void bind_iter(pybind11::module_& m);
void bind_device(pybind11::module_& m);

}  // namespace shardload::python
