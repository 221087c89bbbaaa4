// shardload.LiveModel: a loaded model updated in place (hot reload, RL weight sync) and rebalanced
// (EPLB), whose tensors keep their addresses: a torch tensor taken before an update sees the new bytes.
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <limits>
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

// What a person passed, for an error: the type, and the value when it is short (never a long one).
std::string describe(const py::handle& value) {
  const std::string type = py::str(py::type::handle_of(value).attr("__name__"));
  const std::string text = py::repr(value);
  return text.size() <= 60 ? fmt::format("{} {}", type, text) : type;
}

[[noreturn]] void bad_filter(const std::string& field, const std::string& expected, const py::handle& found) {
  throw Error(ErrorKind::kInvalidArgument, "bad update filter",
              {.field = field, .expected = expected, .found = describe(found)});
}

// A list or tuple (not a str, bytes or other iterable: a str would be taken letter by letter).
py::sequence sequence_of(const py::handle& value, const std::string& field, const std::string& expected) {
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) bad_filter(field, expected, value);
  return py::reinterpret_borrow<py::sequence>(value);
}

std::vector<std::string> substrings_from(const py::handle& value, const std::string& field) {
  constexpr const char* kExpected = "a list of non-empty str";
  std::vector<std::string> out;
  for (const py::handle item : sequence_of(value, field, kExpected)) {
    if (!py::isinstance<py::str>(item)) bad_filter(field, kExpected, item);
    out.push_back(py::cast<std::string>(item));
  }
  if (out.empty()) empty_filter(field, "[]");
  for (const std::string& s : out) {
    if (s.empty()) empty_filter(field, "an empty substring (it is in every name)");
  }
  return out;
}

// A layer or expert number: a Python int (bool is not one here, though Python says it is) in
// [0, 2^31).
int index_from(const py::handle& value, const std::string& field) {
  constexpr const char* kExpected = "[layer, expert] pairs of int from 0 to 2147483647";
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) bad_filter(field, kExpected, value);
  const py::int_ number = py::reinterpret_borrow<py::int_>(value);
  if (number < py::int_(0) || number > py::int_(std::numeric_limits<int>::max())) {
    bad_filter(field, kExpected, value);
  }
  return number.cast<int>();
}

std::vector<std::pair<int, int>> experts_from(const py::handle& value) {
  constexpr const char* kExpected = "a list of [layer, expert] pairs";
  std::vector<std::pair<int, int>> out;
  for (const py::handle pair : sequence_of(value, "filter.experts", kExpected)) {
    const py::sequence items = sequence_of(pair, "filter.experts", kExpected);
    if (items.size() != 2) bad_filter("filter.experts", kExpected, pair);
    out.emplace_back(index_from(items[0], "filter.experts"), index_from(items[1], "filter.experts"));
  }
  if (out.empty()) empty_filter("filter.experts", "[]");
  return out;
}

// filter: None (everything), a str or list of str (substrings), or a dict with "substrings", "regex"
// and "experts" ([[layer, expert], ...]), as /update_weights_from_disk takes them. Anything given
// must select by itself: "", [], [""], {} and a key with an empty value are errors, not everything.
// Every other type or value is a shardload.InvalidArgumentError naming the field, before any I/O.
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
      const std::string name = py::isinstance<py::str>(key) ? py::cast<std::string>(key) : std::string();
      if (name == "substrings") {
        out.substrings = substrings_from(value, "filter.substrings");
      } else if (name == "regex") {
        if (!py::isinstance<py::str>(value)) bad_filter("filter.regex", "a str", value);
        out.regex = py::cast<std::string>(value);
        if (out.regex.empty()) empty_filter("filter.regex", "\"\"");
      } else if (name == "experts") {
        out.experts = experts_from(value);
      } else {
        bad_filter("filter", "the keys substrings, regex, experts", key);
      }
    }
  } else if (py::isinstance<py::list>(filter) || py::isinstance<py::tuple>(filter)) {
    out.substrings = substrings_from(filter, "filter");
  } else {
    bad_filter("filter", "None, a str, a list of str, or a dict of substrings, regex, experts", filter);
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
