#include "serve/shm_store.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <span>

#include "core/fault_injection.h"
#include "core/parallel_copy.h"
#include "core/plural.h"
#include "format/posix_io.h"
#include "load/file_access.h"
#include "serve/engine_manifest.h"
#include "serve/manifest.h"
#include "serve/requests.h"
#include "serve/shm_layout.h"
#include "serve/shm_reuse.h"
#include "serve/source_identity.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"

namespace shardload::serve {
namespace {

namespace fs = std::filesystem;

// How long a start waits for the NAME's lock before saying another server uses the name.
constexpr std::chrono::milliseconds kServerLockWait{3000};

// N when `name` is "rank-N.bin".
std::optional<size_t> rank_of_file(const std::string& name) {
  if (!name.starts_with("rank-") || !name.ends_with(".bin")) return std::nullopt;
  size_t rank = 0;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size() - 4;
  const auto [end, ec] = std::from_chars(first, last, rank);
  if (ec != std::errc() || end != last) return std::nullopt;
  return rank;
}

// The highest version the directory shows (manifest or any rank header), nullopt when none does: a
// reload continues above it, so that a reader comparing versions never sees one come back.
std::optional<uint64_t> highest_version(const std::optional<nlohmann::json>& manifest,
                                        const std::vector<ShmRankFile>& files) {
  std::optional<uint64_t> highest;
  const auto see = [&highest](uint64_t v) { highest = std::max(highest.value_or(0), v); };
  if (manifest) {
    const auto version = manifest->find("version");
    if (version != manifest->end() && version->is_number_unsigned()) see(version->get<uint64_t>());
  }
  for (const ShmRankFile& file : files) {
    if (file.valid() && has_magic(file.header())) see(load_version(file.header()));
  }
  return highest;
}

// The host as the nodes of one server tell hosts apart: its name and its boot (two containers with
// one name on two machines differ), so that nodes sharing /dev/shm find each other.
std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string boot;
  if (FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "re")) {
    char line[64] = {};
    if (std::fgets(line, sizeof(line), file) != nullptr) boot = line;
    std::fclose(file);
  }
  return fmt::format("{}/{}", name, boot);
}

// The nodes of this server that run on this host, in order (this node alone on one node).
std::vector<int> nodes_on_this_host(Transport* transport, int node) {
  if (transport == nullptr) return {node};
  const std::string me = host_identity();
  const std::vector<std::string> all = transport->all_gather(me);
  std::vector<int> out;
  for (size_t n = 0; n < all.size(); ++n) {
    if (all[n] == me) out.push_back(static_cast<int>(n));
  }
  return out;
}

// Removes the shared-memory directory PATH when it is this user's own (ShmDir's checks) and no
// live server holds its lock (flock: the kernel drops it when the holder dies): a directory kept
// by --keep or left by a crash. One a live server holds, or that is not ours, stays.
void remove_if_unheld(const std::string& path) {
  try {
    const ShmDir dir = ShmDir::open(path, "");
    load::UniqueFd lock;
    lock.reset(dir.lock_server(std::chrono::milliseconds(0)));
    if (lock.get() >= 0) dir.remove_all();
  } catch (const Error&) {
    // Not ours to remove (someone else's, a link): left as it is.
  }
}

NodeScope node_scope(const ServeOptions& options) {
  NodeScope scope;
  if (options.transport != nullptr) {
    scope.node = options.transport->node();
    scope.nodes = options.transport->nodes();
  }
  return scope;
}

}  // namespace

ShmStore::ShmStore(const ServeOptions& options)
    : name_(options.name),
      transport_(options.transport != nullptr && options.transport->nodes() > 1 ? options.transport
                                                                                : nullptr),
      scope_(node_scope(options)),
      read_(options.read),
      dir_(ShmDir::open(node_shm_dir(options.name, scope_.node, scope_.nodes), options.shm_group)),
      threads_(options.threads),
      staging_bytes_(options.staging_bytes),
      double_buffer_(options.double_buffer),
      engine_(options.engine) {
  if (double_buffer_) {
    const char* conflict = transport_ != nullptr        ? "a server on several nodes (updates commit on every node)"
                           : options.device != "cpu"    ? "--device cuda (the GPU copies are one buffer)"
                           : options.staging_bytes != 0 ? "--staging-bytes (the second slot is the staging)"
                                                        : nullptr;
    if (conflict != nullptr) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--double-buffer does not apply to {}", conflict),
                  {.field = "--double-buffer"});
    }
  }
  // The kernel drops the lock when its holder dies, even by SIGKILL, so a crash never blocks a
  // restart. Readers never take it; the wait covers a server of this user stopping (or cleaning up
  // a stale node directory) as this one starts.
  server_lock_.reset(dir_.lock_server(kServerLockWait));
  bool locked = server_lock_.get() >= 0;
  // One lock covers the NAME in all its forms on this host: the directory shm_dir(NAME), held by a
  // server on one node and, on several, by the lowest node of each host. So a server on one node
  // and one on several never share a NAME here, nor two servers on several nodes.
  host_nodes_ = nodes_on_this_host(transport_, scope_.node);
  std::string why_refused;
  if (locked && scope_.nodes > 1 && host_nodes_.front() == scope_.node) {
    try {
      name_dir_ = ShmDir::open(shm_dir(name_), options.shm_group);
      name_lock_.reset(name_dir_.lock_server(kServerLockWait));
      locked = name_lock_.get() >= 0;
    } catch (const Error& e) {
      why_refused = e.what();
    }
  }
  try {
    // Every node learns that one was refused, so that none loads alone.
    on_every_node([&] {
      if (!why_refused.empty()) throw Error(ErrorKind::kInvalidArgument, why_refused);
      if (!locked) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("another shardload serve is using the name {} on this host (pick "
                                "another --name)",
                                name_),
                    {.file = dir(), .field = "--name"});
      }
    });
  } catch (const Error&) {
    server_lock_.reset();
    name_lock_.reset();
    name_dir_ = ShmDir();
    throw;
  }
  try {
    dir_.apply_access();
    alive_.reset(dir_.mark_alive());
    remove_stale_dirs();
    open_or_load(options);
  } catch (...) {
    live_ = LiveModel();
    files_.clear();
    if (!options.keep) remove();
    throw;
  }
}

ShmStore::~ShmStore() {
  live_ = LiveModel();
  files_.clear();
}

void ShmStore::on_every_node(const std::function<void()>& step) {
  if (transport_ == nullptr) return step();
  run_on_every_node(*transport_, step);
}

ShmStore::Found ShmStore::examine(const Checkpoint& checkpoint, Plan plan,
                                  const ServeOptions& options, const std::string& model_path) {
  Found found;
  const std::vector<std::string> names = dir_.names();
  if (std::all_of(names.begin(), names.end(), [](const std::string& name) {
        return name == kShmServerLockName || name == kShmServerAliveName || name == kShmApiKeyName;
      })) {
    found.empty = true;
    found.why = "nothing to reuse";
    found.plan = std::move(plan);
    return found;
  }
  files_.resize(static_cast<size_t>(scope_.held.last - scope_.held.first));
  for (size_t i = 0; i < files_.size(); ++i) {
    std::string file_why;
    const int rank = scope_.held.first + static_cast<int>(i);
    files_[i] = ShmRankFile::open_existing(dir_, rank_file_name(rank), &file_why);
    if (!files_[i].valid() && found.why.empty()) found.why = file_why;
  }
  const std::optional<nlohmann::json> manifest = read_manifest(dir_, &found.why);
  found.seen = highest_version(manifest, files_);
  if (!manifest || !found.why.empty()) {
    found.plan = std::move(plan);
    return found;
  }
  Plan candidate;
  // A server that rebalanced left its own map; without an explicit --expert-map, that map is the
  // layout to reuse (the bytes are placed by it).
  const auto found_map = manifest_expert_map(*manifest);
  if (options.parallel.expert_map.empty() && plan.model.is_moe() && found_map &&
      *found_map != plan.physical_to_logical) {
    ParallelConfig parallel = options.parallel;
    parallel.expert_map = *found_map;
    try {
      candidate = make_plan(checkpoint, parallel);
    } catch (const Error&) {
      // Not a map this model can take: the plain comparison below reports the difference.
    }
  }
  found.plan = candidate.ranks.empty() ? std::move(plan) : std::move(candidate);
  found.why = reuse_obstacle(*manifest, files_, found.plan, model_path, checkpoint.identity(), scope_);
  return found;
}

bool ShmStore::agree_on_reuse(Found& found) {
  if (transport_ == nullptr) return found.why.empty();
  // Each node's verdict, version and map: a node reuses only when all of them can, at one version
  // and one placement, so that no node serves bytes another node replaced.
  const nlohmann::json mine = {{"why", found.why},
                               {"seen", found.seen ? nlohmann::json(*found.seen) : nlohmann::json()},
                               {"map", found.plan.physical_to_logical}};
  const std::vector<std::string> all = transport_->all_gather(mine.dump());
  bool reuse = true;
  std::string why;
  std::optional<uint64_t> highest;
  std::optional<nlohmann::json> first_state;
  for (size_t n = 0; n < all.size(); ++n) {
    nlohmann::json node;
    try {
      node = nlohmann::json::parse(all[n]);
      const nlohmann::json state = {node.at("seen"), node.at("map")};
      if (!first_state) first_state = state;
      if (!node.at("why").get<std::string>().empty()) {
        reuse = false;
        if (why.empty()) why = fmt::format("node {}: {}", n, node.at("why").get<std::string>());
      } else if (state != *first_state) {
        reuse = false;
        if (why.empty()) why = fmt::format("node {} holds another version or map than node 0", n);
      }
      if (node.at("seen").is_number_unsigned()) {
        highest = std::max(highest.value_or(0), node.at("seen").get<uint64_t>());
      }
    } catch (const std::exception&) {
      throw Error(ErrorKind::kNode,
                  fmt::format("node {} sent a start-up state that is not one", n),
                  {.expected = "a JSON object", .found = fmt::format("{} bytes", all[n].size())});
    }
  }
  found.seen = highest;
  if (!reuse) found.why = why;
  return reuse;
}

void ShmStore::adopt(Found found, const std::string& model_path, const CheckpointIdentity& identity) {
  live_.model_path = model_path;
  // Reused only when every source is this checkpoint as it is now, whole: the bytes are its own.
  sources_ = nlohmann::json::array();
  record_source(model_path, {}, true, &identity);
  live_.version = found.seen.value_or(0);
  live_.plan = std::move(found.plan);
  for (size_t i = 0; i < files_.size(); ++i) {
    // The bytes were post-processed by the server that wrote them.
    live_.ranks.push_back({scope_.held.first + static_cast<int>(i), files_[i].map_data(),
                           std::vector<uint8_t>(live_.plan.modules.size(), 1)});
  }
  // Written again so that it gets this directory's file mode, and the headers the version
  // (files of a server that predates the header's version word have none).
  write_manifest();
  reused_ = true;
  note_ = fmt::format("reusing {} (version {})", dir(), live_.version);
}

void ShmStore::open_or_load(const ServeOptions& options) {
  const std::string model_path = absolute_model_path(options.model_path);
  std::optional<Checkpoint> checkpoint;
  Found found;
  on_every_node([&] {
    checkpoint.emplace(Checkpoint::open(model_path));
    Plan plan = make_plan(*checkpoint, options.parallel);
    scope_.held = node_ranks(static_cast<int>(plan.ranks.size()), scope_.nodes, scope_.node);
    found = examine(*checkpoint, std::move(plan), options, model_path);
  });
  if (transport_ != nullptr) check_same_plan(*transport_, found.plan);
  // A double-buffered server loads at each start: its spare slot's state is not recorded anywhere
  // a restart could trust. That is the reason it reloads, whatever else the directory shows.
  if (double_buffer_ && !found.empty) found.why = "a double-buffered server loads at each start";
  if (agree_on_reuse(found)) {
    on_every_node([&] { adopt(std::move(found), model_path, checkpoint->identity()); });
    return;
  }
  // Reloaded under the checkpoint's own placement (or --expert-map), as a new server would: a map
  // left in a manifest that cannot be reused is not trusted.
  if (!found.empty || found.seen) note_ = "reloading: " + found.why;
  Plan plan = make_plan(*checkpoint, options.parallel);
  load(*checkpoint, std::move(plan), model_path, found.seen ? *found.seen + 1 : 0);
}

// Readers must not follow an old manifest into files that are about to change shape; temporary
// manifests of a killed server and rank-N.bin files with N outside the layout (an earlier server
// with more ranks) go too.
void ShmStore::remove_leftovers() const {
  dir_.unlink("manifest.json");
  for (const std::string& name : dir_.names()) {
    const std::optional<size_t> rank = rank_of_file(name);
    const bool held = rank && *rank >= static_cast<size_t>(scope_.held.first) &&
                      *rank < static_cast<size_t>(scope_.held.last);
    if (name.starts_with(kManifestTempPrefix) || (rank && !held)) dir_.unlink(name);
  }
}

void ShmStore::load(const Checkpoint& checkpoint, Plan plan, const std::string& model_path,
                    uint64_t version) {
  std::vector<RankWeights> ranks;
  // Files are made on every node before any reads: a node that cannot make them (a full /dev/shm)
  // stops every node before the striped reads wait on it.
  on_every_node([&] {
    remove_leftovers();
    files_.resize(static_cast<size_t>(scope_.held.last - scope_.held.first));
    for (size_t i = 0; i < files_.size(); ++i) {
      const int rank = scope_.held.first + static_cast<int>(i);
      const uint64_t bytes = plan.ranks[static_cast<size_t>(rank)].bytes;
      ShmRankFile& file = files_[i];
      // A file of the right size is loaded in place, so that a process which mapped it sees the
      // reload through its header; any other is replaced by a new file.
      const bool in_place = !double_buffer_ && file.valid() && file.file_bytes() == kShmHeaderBytes + bytes &&
                            has_magic(file.header());
      if (!in_place) {
        file = double_buffer_ ? ShmRankFile::create_double(dir_, rank_file_name(rank), bytes)
                              : ShmRankFile::create(dir_, rank_file_name(rank), bytes);
      }
      set_update_in_progress(file.header());
      begin_sequence(file.header());
      // Every header word is this load's: a file reused in place may hold another server's words
      // (a double-buffered one's active slot at slot 1), which readers would follow into the bytes.
      store_active_slot(file.header(), 0);
      ranks.push_back({rank, double_buffer_ ? file.map_slot(0, bytes) : file.map_data(), {}});
      // The loader writes every tensor byte but leaves padding as it finds it: zero in a new
      // buffer.
      if (in_place) std::memset(ranks.back().buffer.data(), 0, ranks.back().buffer.size());
    }
  });
  LoadOptions load_options;
  load_options.threads = threads_;
  if (transport_ != nullptr) {
    load_node_into(checkpoint, plan, assign_reads(plan, scope_.nodes, read_), *transport_, ranks,
                   load_options);
  } else {
    load_into(checkpoint, plan, ranks, {}, load_options);
  }

  live_.model_path = model_path;
  live_.plan = std::move(plan);
  live_.ranks = std::move(ranks);
  live_.version = version;
  if (double_buffer_) fill_spare_slots();
  // Manifest first, headers last: a server killed in between leaves odd words and set flags, and a
  // restart reloads.
  on_every_node([&] {
    sources_ = nlohmann::json::array();
    record_source(model_path, {}, true, &checkpoint.identity());
    serve::write_manifest(dir_, manifest(false));
    for (ShmRankFile& file : files_) end_sequence(file.header());
    for (ShmRankFile& file : files_) publish_version(file.header(), live_.version);
  });
  if (note_.empty()) {
    uint64_t total = 0;
    for (const RankWeights& rank : live_.ranks) total += rank.buffer.size();
    note_ = fmt::format("loaded {} into {}: {}, {} bytes{}", model_path, dir(),
                        count_of(live_.ranks.size(), "rank"), total,
                        double_buffer_ ? " (double-buffered: two slots per rank)" : "");
  }
}

void ShmStore::fill_spare_slots() {
  live_.spare = SpareBuffers();
  slot0_.clear();
  for (size_t i = 0; i < files_.size(); ++i) {
    const AlignedBuffer& live = live_.ranks[i].buffer;
    slot0_.push_back(live.data());
    live_.spare.buffers.push_back(files_[i].map_slot(1, live.size()));
  }
  // One copy of every byte, once: from here on an update copies only what the last one rewrote.
  std::vector<ByteCopy> copies;
  for (size_t i = 0; i < files_.size(); ++i) {
    copies.push_back({live_.spare.buffers[i].data(), live_.ranks[i].buffer.data(), live_.ranks[i].buffer.size()});
  }
  parallel_copy(copies, threads_);
  live_.spare.stale.assign(files_.size(), {});
  store_active_slots();
}

void ShmStore::store_active_slots() {
  for (size_t i = 0; i < files_.size(); ++i) {
    const AlignedBuffer& live = live_.ranks[i].buffer;
    store_active_slot(files_[i].header(), live.data() == slot0_[i] ? 0 : shm_slot_bytes(live.size()));
  }
}

UpdateOptions ShmStore::update_options() {
  UpdateOptions options;
  options.threads = threads_;
  options.staging_bytes = staging_bytes_;
  // A server updates again and again (RL weight sync): the staging area stays faulted in between
  // updates, which halves their time here, at the cost of one resident copy of the updated bytes
  // (docs/reload.md).
  options.keep_staging = true;
  options.begin_commit = [this] {
    for (ShmRankFile& file : files_) begin_sequence(file.header());
  };
  options.end_commit = [this] {
    // The GPUs' copies change inside the commit too; a failed copy still ends the commit (host
    // readers must not spin on an odd word) and then fails the update.
    std::exception_ptr device_error;
    if (device_sync_) {
      try {
        device_sync_();
      } catch (...) {
        device_error = std::current_exception();
      }
    }
    // Double buffering: the live buffers were swapped with the spare ones; readers switch slots here.
    if (double_buffer_) {
      store_active_slots();
      // The version this commit makes (one group: run_update counts it next).
      for (ShmRankFile& file : files_) publish_version(file.header(), live_.version + 1);
    }
    for (ShmRankFile& file : files_) end_sequence(file.header());
    if (device_error) std::rethrow_exception(device_error);
  };
  return options;
}

nlohmann::json ShmStore::manifest(bool update_in_progress) const {
  nlohmann::json manifest = make_manifest(name_, live_, update_in_progress, scope_);
  manifest["sources"] = sources_;
  if (double_buffer_) {
    manifest["format"] = kShmDoubleBufferFormat;
    manifest["slots"] = 2;
    for (nlohmann::json& rank : manifest["ranks"]) {
      const uint64_t slot = shm_slot_bytes(rank["bytes"].get<uint64_t>() - kShmHeaderBytes);
      rank["slot_bytes"] = slot;
      rank["bytes"] = kShmHeaderBytes + 2 * slot;
    }
  }
  if (!device_manifest_.is_null()) manifest["cuda"] = device_manifest_;
  if (engine_ != Engine::kLayout) {
    manifest["engine"] = engine_name(engine_);
    manifest["engine_ranks"] = engine_manifest_ranks(live_.plan, scope_.held, engine_);
  }
  return manifest;
}

void ShmStore::write_manifest() {
  serve::write_manifest(dir_, manifest(false));
  for (ShmRankFile& file : files_) publish_version(file.header(), live_.version);
}

void ShmStore::begin_change() {
  try {
    fault::at("begin_manifest");
    serve::write_manifest(dir_, manifest(true));
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{} (before any byte changed: nothing was changed)", e.message()),
                e.details());
  }
  // Double buffering: the commit is one switch of slots on every rank between the sequence words,
  // and it publishes its version there too; readers need not wait for the whole update.
  if (!double_buffer_) {
    for (ShmRankFile& file : files_) set_update_in_progress(file.header());
  }
}

std::string ShmStore::publish_change() noexcept {
  // Readers first: the header words are what they check, and they hold whatever the manifest
  // write below does. A commit group that failed between its sequence words left them odd.
  for (ShmRankFile& file : files_) end_sequence(file.header());
  for (ShmRankFile& file : files_) publish_version(file.header(), live_.version);
  std::string why;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      fault::at("publish_manifest");
      serve::write_manifest(dir_, manifest(false));
      return {};
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  try {
    return fmt::format(
        "the manifest could not be rewritten ({}); the rank headers publish version {} and the "
        "bytes are whole, but manifest.json still shows the state before this change with "
        "update_in_progress, so a restart reloads instead of reusing the directory",
        why, live_.version);
  } catch (...) {
    return "the manifest could not be rewritten";
  }
}

void ShmStore::record_source(const std::string& model_path, const WeightFilter& filter,
                             bool complete, const CheckpointIdentity* identity) {
  nlohmann::json source = identity != nullptr ? identity_json(*identity) : nlohmann::json::object();
  source["model_path"] = model_path;
  if (!filter.selects_all()) source["filter"] = describe_filter(filter);
  if (!complete) source["incomplete"] = true;
  if (filter.selects_all() && complete) sources_ = nlohmann::json::array();
  sources_.push_back(std::move(source));
}

void ShmStore::write_api_key(const std::string& key) const {
  const std::string name(kShmApiKeyName);
  if (key.empty()) {
    dir_.unlink(name);
    return;
  }
  // A new file: a reader holding the old one open never reads a key half written.
  const int fd = dir_.create_file(name, /*replace=*/true);
  const std::string text = key + "\n";
  try {
    format::write_exact(fd, std::as_bytes(std::span(text)), {.file = dir_.file_path(name)});
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void ShmStore::remove() const {
  dir_.remove_all();
  // The NAME's lock directory of a server on several nodes holds nothing of its own.
  if (name_dir_.fd() >= 0) name_dir_.remove_all();
}

void ShmStore::remove_stale_dirs() const {
  const std::string base = shm_dir(name_);
  const std::string prefix = std::filesystem::path(base).filename().string() + ".node-";
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(fs::path(base).parent_path(), error)) {
    const std::string leaf = entry.path().filename().string();
    if (!leaf.starts_with(prefix)) continue;
    int node = -1;
    const char* first = leaf.data() + prefix.size();
    const char* last = leaf.data() + leaf.size();
    const auto [end, ec] = std::from_chars(first, last, node);
    if (ec != std::errc() || end != last || first == last) continue;
    if (scope_.nodes > 1 && std::find(host_nodes_.begin(), host_nodes_.end(), node) != host_nodes_.end()) {
      continue;  // a node of this server on this host: its own directory
    }
    remove_if_unheld(entry.path().string());
  }
  if (scope_.nodes > 1) {
    // What a server on one node kept in the NAME's directory would shadow this server's nodes.
    for (const std::string& leaf : name_dir_.names()) {
      if (leaf == "manifest.json" || leaf.starts_with(kManifestTempPrefix) || rank_of_file(leaf)) {
        name_dir_.unlink(leaf);
      }
    }
  }
}

std::string absolute_model_path(const std::string& arg, const std::string& revision) {
  // A model id: its snapshot in the HF cache (at `revision`, else main).
  const std::string path = resolve_model_path(arg, revision);
  std::error_code error;
  const fs::path full = fs::absolute(path, error);
  if (error) return path;
  std::string out = full.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace shardload::serve
