// shardload.LiveModel: a loaded model updated in place (hot reload, RL weight sync) and rebalanced
// (EPLB), whose tensors keep their addresses: a torch tensor taken before an update sees the new bytes.
#include <pybind11/stl.h>

#include <memory>
#include <mutex>

#include "python/bindings.h"
#include "python/path_arg.h"
#include "python/json_value.h"
#include "python/layout_kwargs.h"
#include "python/rank_tensors.h"
#include "shardload/error.h"
#include "shardload/reload.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

struct LiveHolder {
  LiveModel live;
  std::mutex mutex;  // one update or rebalance at a time (each releases the GIL)
};

py::dict result_dict(const UpdateResult& r) {
  py::dict out;
  out["version"] = r.version;
  out["updated_tensors"] = r.updated_tensors;
  out["changed_bytes"] = r.changed_bytes;
  out["read_bytes"] = r.read_bytes;
  out["local_bytes"] = r.local_bytes;
  out["remote_bytes"] = r.remote_bytes;
  out["modules"] = r.modules;
  out["groups"] = r.groups;
  out["seconds_stage"] = r.seconds_stage;
  out["seconds_commit"] = r.seconds_commit;
  out["max_pause_seconds"] = r.max_pause_seconds;
  return out;
}

// An empty filter would leave the WeightFilter with nothing set, which update_weights reads as no
// filter: every tensor rewritten. Refused, as /update_weights_from_disk refuses [] and [""].
[[noreturn]] void empty_filter(const std::string& field, const std::string& found) {
  throw Error(ErrorKind::kInvalidArgument, "an empty filter would update every tensor",
              {.field = field, .expected = "a non-empty filter (filter=None updates everything)",
               .found = found});
}

std::vector<std::string> substrings_from(const py::handle& value, const std::string& field) {
  std::vector<std::string> out = py::cast<std::vector<std::string>>(value);
  if (out.empty()) empty_filter(field, "[]");
  for (const std::string& s : out) {
    if (s.empty()) empty_filter(field, "an empty substring (it is in every name)");
  }
  return out;
}

// filter: None (everything), a str or list of str (substrings), or a dict with "substrings", "regex"
// and "experts" ([[layer, expert], ...]), as /update_weights_from_disk takes them. Anything given
// must select by itself: "", [], [""], {} and a key with an empty value are errors, not everything.
WeightFilter filter_from(const py::object& filter) {
  WeightFilter out;
  if (filter.is_none()) return out;
  if (py::isinstance<py::str>(filter)) {
    out.substrings.push_back(py::cast<std::string>(filter));
    if (out.substrings[0].empty()) empty_filter("filter", "\"\"");
  } else if (py::isinstance<py::dict>(filter)) {
    const py::dict d = py::reinterpret_borrow<py::dict>(filter);
    if (d.empty()) empty_filter("filter", "{}");
    for (const auto& [key, value] : d) {
      const std::string name = py::cast<std::string>(key);
      if (name == "substrings") {
        out.substrings = substrings_from(value, "filter.substrings");
      } else if (name == "regex") {
        out.regex = py::cast<std::string>(value);
        if (out.regex.empty()) empty_filter("filter.regex", "\"\"");
      } else if (name == "experts") {
        for (const auto& pair : py::cast<std::vector<std::vector<int>>>(value)) {
          if (pair.size() != 2) throw py::value_error("experts are [layer, expert] pairs");
          out.experts.emplace_back(pair[0], pair[1]);
        }
        if (out.experts.empty()) empty_filter("filter.experts", "[]");
      } else {
        throw py::type_error("unknown filter key '" + name + "' (substrings, regex, experts)");
      }
    }
  } else {
    out.substrings = substrings_from(filter, "filter");
  }
  return out;
}

class PyLiveModel {
 public:
  PyLiveModel(const py::object& model_path, int threads, const py::kwargs& layout)
      : holder_(std::make_shared<LiveHolder>()) {
    const std::string model = path_arg(model_path);
    const ParallelConfig parallel = layout_from_kwargs(layout);
    LoadOptions options;
    options.threads = threads;
    py::gil_scoped_release release;
    holder_->live = load_live(model, parallel, options);
  }

  py::dict update_weights(const py::object& path_object, const py::object& filter, int threads,
                          uint64_t staging_bytes) {
    const std::string path = path_arg(path_object);
    const WeightFilter f = filter_from(filter);
    UpdateResult result;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(holder_->mutex);
      UpdateOptions options;
      options.threads = threads;
      options.staging_bytes = staging_bytes;
      result = shardload::update_weights(holder_->live, path, f, options);
    }
    return result_dict(result);
  }

  py::dict rebalance(const std::vector<std::vector<int>>& map, uint64_t staging_bytes) {
    UpdateResult result;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(holder_->mutex);
      UpdateOptions options;
      options.staging_bytes = staging_bytes;
      result = rebalance_experts(holder_->live, map, options);
    }
    return result_dict(result);
  }

  // Readers take the lock too (holding the GIL is safe: an update releases the lock before it takes the
  // GIL back), so that a rebalance never swaps the plan under them.
  py::dict tensors(int rank, bool internal) const {
    std::lock_guard lock(holder_->mutex);
    const LiveModel& live = holder_->live;
    if (rank < 0 || static_cast<size_t>(rank) >= live.ranks.size()) {
      throw py::index_error("no rank " + std::to_string(rank));
    }
    return rank_tensors(holder_, live.plan, live.ranks[static_cast<size_t>(rank)], internal);
  }

  uint64_t version() const {
    std::lock_guard lock(holder_->mutex);
    return holder_->live.version;
  }
  std::string model_path() const {
    std::lock_guard lock(holder_->mutex);
    return holder_->live.model_path;
  }
  int rank_count() const { return static_cast<int>(holder_->live.ranks.size()); }
  py::object plan(bool pieces) const {
    std::lock_guard lock(holder_->mutex);
    return to_python(holder_->live.plan.to_json(pieces));
  }
  std::vector<std::vector<int>> expert_map() const {
    std::lock_guard lock(holder_->mutex);
    return holder_->live.plan.physical_to_logical;
  }

 private:
  std::shared_ptr<LiveHolder> holder_;
};

}  // namespace

void bind_live(py::module_& m) {
  py::class_<PyLiveModel>(m, "LiveModel",
                          "A model loaded once and updated in place: tensors keep their addresses")
      .def(py::init<const py::object&, int, const py::kwargs&>(), py::arg("model"), py::kw_only(),
           py::arg("threads") = 0)
      .def("update_weights", &PyLiveModel::update_weights, py::arg("path"), py::arg("filter") = py::none(),
           py::kw_only(), py::arg("threads") = 0, py::arg("staging_bytes") = 0,
           "Reloads the tensors `filter` selects from checkpoint `path`, atomically, in place")
      .def("rebalance", &PyLiveModel::rebalance, py::arg("physical_to_logical_map"), py::kw_only(),
           py::arg("staging_bytes") = 0, "Applies a new expert map by moving live bytes (reads nothing)")
      .def("tensors", &PyLiveModel::tensors, py::arg("rank"), py::kw_only(), py::arg("internal") = false)
      .def_property_readonly("version", &PyLiveModel::version)
      .def_property_readonly("model_path", &PyLiveModel::model_path)
      .def_property_readonly("rank_count", &PyLiveModel::rank_count)
      .def_property_readonly("expert_map", &PyLiveModel::expert_map)
      .def("plan", &PyLiveModel::plan, py::kw_only(), py::arg("pieces") = false);
}

}  // namespace shardload::python
