// The names of the engines an export can be written for (shardload.json's "engine"), apart from
// the tables of engine_tensors.cc so that what reads a manifest (the fuzz target too) needs only this.
#include "shardload/export.h"

namespace shardload {

std::string_view engine_name(Engine engine) {
  for (const auto& [value, name] : kEngineNames) {
    if (value == engine) return name;
  }
  return "layout";
}

std::optional<Engine> engine_from_name(std::string_view name) {
  for (const auto& [value, text] : kEngineNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

}  // namespace shardload
