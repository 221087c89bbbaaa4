#pragma once

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

namespace shardload::python {

// A JSON value as Python objects (dicts, lists, str, int, float, bool, None), through Python's json
// module: plans and configs are read once per call, not per element.
inline pybind11::object to_python(const nlohmann::json& value) {
  return pybind11::module_::import("json").attr("loads")(value.dump());
}

}  // namespace shardload::python
