#include "serve/source_identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

namespace shardload::serve {
namespace {

std::string hex(uint64_t value) { return fmt::format("{:016x}", value); }

nlohmann::json file_json(const FileIdentity& file) {
  return {{"device", file.device},
          {"inode", file.inode},
          {"size", file.size},
          {"mtime_ns", file.mtime_ns},
          {"header_xxh3", hex(file.header_xxh3)}};
}

// What changed in one file, first the change a person would recognise.
std::string file_change(const std::string& name, const nlohmann::json& was, const FileIdentity& now) {
  if (was != file_json(now)) {
    const auto same = [&](const char* key, const nlohmann::json& value) {
      const auto it = was.find(key);
      return it != was.end() && *it == value;
    };
    if (!same("device", now.device) || !same("inode", now.inode)) {
      return fmt::format("{} is another file than the one read (replaced, or a link pointed elsewhere)",
                         name);
    }
    if (!same("size", now.size)) return fmt::format("{} changed size (rewritten in place)", name);
    if (!same("header_xxh3", hex(now.header_xxh3))) {
      return fmt::format("{}'s header changed (rewritten in place)", name);
    }
    return fmt::format("{} was modified since it was read (its modification time changed)", name);
  }
  return {};
}

}  // namespace

nlohmann::json identity_json(const CheckpointIdentity& identity) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, file] : identity.files) files[name] = file_json(file);
  return {{"resolved_path", identity.resolved_path},
          {"config_xxh3", hex(identity.config_xxh3)},
          {"files", std::move(files)}};
}

std::string identity_difference(const nlohmann::json& recorded, const CheckpointIdentity& now) {
  const auto path = recorded.find("resolved_path");
  const auto config = recorded.find("config_xxh3");
  const auto files = recorded.find("files");
  if (path == recorded.end() || config == recorded.end() || files == recorded.end() ||
      !path->is_string() || !files->is_object()) {
    return "the manifest does not record which files the live bytes were read from (a directory "
           "kept by an older server)";
  }
  if (*path != now.resolved_path) {
    return fmt::format("the model path now resolves to {}, the live bytes were read from {}",
                       now.resolved_path, path->get<std::string>());
  }
  std::map<std::string, const FileIdentity*> present;
  for (const auto& [name, file] : now.files) present.emplace(name, &file);
  for (const auto& [name, was] : files->items()) {
    const auto it = present.find(name);
    if (it == present.end()) return fmt::format("{} is no longer part of the checkpoint", name);
    const std::string change = file_change(name, was, *it->second);
    if (!change.empty()) return change;
  }
  for (const auto& [name, file] : now.files) {
    if (!files->contains(name)) return fmt::format("{} was added to the checkpoint", name);
  }
  if (*config != hex(now.config_xxh3)) {
    // Named as the files the configuration is read from now: hf_quant_config.json's quantization
    // settings change what the bytes mean as much as config.json's.
    return fmt::format("{} changed", now.config_files.empty() ? std::string("config.json")
                                                              : fmt::format("{}", fmt::join(now.config_files, " or ")));
  }
  return {};
}

}  // namespace shardload::serve
