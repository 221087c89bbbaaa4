#include "python/errors.h"

#include "shardload/error.h"

namespace py = pybind11;

namespace shardload::python {

void register_error_translator(py::module_&) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      // The Python side decides the class; raising through it keeps one definition of the hierarchy.
      py::object errors = py::module_::import("shardload.errors");
      using namespace pybind11::literals;
      py::object error = errors.attr("make_error")(std::string(error_kind_name(e.kind())), e.message(),
                                                   "file"_a = e.file(), "tensor"_a = e.tensor(),
                                                   "field"_a = e.field(), "expected"_a = e.expected(),
                                                   "found"_a = e.found());
      PyErr_SetObject(error.get_type().ptr(), error.ptr());
    }
  });
}

}  // namespace shardload::python
