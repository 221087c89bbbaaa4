#pragma once

#include <string>

#include <pybind11/pybind11.h>

namespace shardload::python {

// A path argument: a str or any os.PathLike (pathlib.Path), as Python's own file functions take.
inline std::string path_arg(const pybind11::handle& value) {
  if (pybind11::isinstance<pybind11::str>(value)) return pybind11::cast<std::string>(value);
  if (pybind11::hasattr(value, "__fspath__")) {
    return pybind11::cast<std::string>(pybind11::module_::import("os").attr("fspath")(value));
  }
  throw pybind11::type_error("expected a path (str or os.PathLike)");
}

}  // namespace shardload::python
