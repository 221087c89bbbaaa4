#pragma once

#include <pybind11/pybind11.h>

namespace shardload::python {

// shardload::Error becomes the shardload.errors class of its kind (python/shardload/errors.py), with
// kind, file, tensor, field, expected and found as attributes.
void register_error_translator(pybind11::module_& m);

}  // namespace shardload::python
