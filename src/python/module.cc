// shardload._shardload: the C++ library for the Python package (python/shardload/).
#include <pybind11/pybind11.h>

#include "python/bindings.h"
#include "python/errors.h"
#include "python/tensor.h"

PYBIND11_MODULE(_shardload, m) {
  m.doc() = "shardload's C++ core: checkpoints, plans, loads, live models and exports";
  shardload::python::register_error_translator(m);
  shardload::python::bind_tensor(m);
  shardload::python::bind_checkpoint(m);
  shardload::python::bind_load(m);
  shardload::python::bind_live(m);
  shardload::python::bind_export(m);
  shardload::python::bind_iter(m);
  shardload::python::bind_device(m);
}
