#include "serve/shm_store.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>

#include "core/plural.h"
#include "serve/manifest.h"
#include "serve/shm_layout.h"
#include "serve/shm_reuse.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"

namespace shardload::serve {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

ShmStore::ShmStore(const ServeOptions& options)
    : name_(options.name),
      dir_(ShmDir::open(shm_dir(options.name), options.shm_group)),
      threads_(options.threads),
      staging_bytes_(options.staging_bytes) {
  // The kernel drops the lock when its holder dies, even by SIGKILL, so a crash never blocks a
  // restart.
  if (::flock(dir_.fd(), LOCK_EX | LOCK_NB) != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("another shardload serve is using {} (pick another --name)", dir()),
                {.field = "--name"});
  }
  try {
    dir_.apply_access();
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

void ShmStore::open_or_load(const ServeOptions& options) {
  const std::string model_path = absolute_model_path(options.model_path);
  const Checkpoint checkpoint = Checkpoint::open(model_path);
  Plan plan = make_plan(checkpoint, options.parallel);
  if (dir_.names().empty()) return load(checkpoint, std::move(plan), model_path, 0);

  std::string why;
  files_.resize(plan.ranks.size());
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    std::string file_why;
    files_[r] = ShmRankFile::open_existing(dir_, rank_file_name(static_cast<int>(r)), &file_why);
    if (!files_[r].valid() && why.empty()) why = file_why;
  }
  const std::optional<nlohmann::json> manifest = read_manifest(dir_, &why);
  const std::optional<uint64_t> seen = highest_version(manifest, files_);
  if (manifest && why.empty()) {
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
    const Plan& reuse_plan = candidate.ranks.empty() ? plan : candidate;
    why = reuse_obstacle(*manifest, files_, reuse_plan, model_path);
    if (why.empty()) {
      live_.model_path = model_path;
      live_.version = seen.value_or(0);
      live_.plan = candidate.ranks.empty() ? std::move(plan) : std::move(candidate);
      for (size_t r = 0; r < files_.size(); ++r) {
        // The bytes were post-processed by the server that wrote them.
        live_.ranks.push_back({static_cast<int>(r), files_[r].map_data(),
                               std::vector<uint8_t>(live_.plan.modules.size(), 1)});
      }
      // Written again so that it gets this directory's file mode, and the headers the version
      // (files of a server that predates the header's version word have none).
      write_manifest(false);
      reused_ = true;
      note_ = fmt::format("reusing {} (version {})", dir(), live_.version);
      return;
    }
  }
  note_ = "reloading: " + why;
  load(checkpoint, std::move(plan), model_path, seen ? *seen + 1 : 0);
}

// Readers must not follow an old manifest into files that are about to change shape; temporary
// manifests of a killed server and rank-N.bin files with N outside the layout (an earlier server
// with more ranks) go too.
void ShmStore::remove_leftovers(size_t ranks) const {
  dir_.unlink("manifest.json");
  for (const std::string& name : dir_.names()) {
    const std::optional<size_t> rank = rank_of_file(name);
    if (name.starts_with(kManifestTempPrefix) || (rank && *rank >= ranks)) dir_.unlink(name);
  }
}

void ShmStore::load(const Checkpoint& checkpoint, Plan plan, const std::string& model_path,
                    uint64_t version) {
  remove_leftovers(plan.ranks.size());
  files_.resize(plan.ranks.size());

  std::vector<RankWeights> ranks;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const uint64_t bytes = plan.ranks[r].bytes;
    ShmRankFile& file = files_[r];
    // A file of the right size is loaded in place, so that a process which mapped it sees the
    // reload through its header; any other is replaced by a new file.
    const bool in_place =
        file.valid() && file.file_bytes() == kShmHeaderBytes + bytes && has_magic(file.header());
    if (!in_place) file = ShmRankFile::create(dir_, rank_file_name(static_cast<int>(r)), bytes);
    set_update_in_progress(file.header());
    begin_sequence(file.header());
    ranks.push_back({static_cast<int>(r), file.map_data(), {}});
    // The loader writes every tensor byte but leaves padding as it finds it: zero in a new buffer.
    if (in_place) std::memset(ranks.back().buffer.data(), 0, ranks.back().buffer.size());
  }
  LoadOptions load_options;
  load_options.threads = threads_;
  load_into(checkpoint, plan, ranks, {}, load_options);

  live_.model_path = model_path;
  live_.plan = std::move(plan);
  live_.ranks = std::move(ranks);
  live_.version = version;
  // Manifest first, headers last: a server killed in between leaves odd words and set flags, and a
  // restart reloads.
  serve::write_manifest(dir_, make_manifest(name_, live_, false));
  for (ShmRankFile& file : files_) end_sequence(file.header());
  for (ShmRankFile& file : files_) publish_version(file.header(), live_.version);
  if (note_.empty()) {
    uint64_t total = 0;
    for (const RankWeights& rank : live_.ranks) total += rank.buffer.size();
    note_ = fmt::format("loaded {} into {}: {}, {} bytes", model_path, dir(),
                        count_of(live_.ranks.size(), "rank"), total);
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
    for (ShmRankFile& file : files_) end_sequence(file.header());
    if (device_error) std::rethrow_exception(device_error);
  };
  return options;
}

void ShmStore::write_manifest(bool update_in_progress) {
  nlohmann::json manifest = make_manifest(name_, live_, update_in_progress);
  if (!device_manifest_.is_null()) manifest["cuda"] = device_manifest_;
  serve::write_manifest(dir_, manifest);
  for (ShmRankFile& file : files_) {
    if (update_in_progress) {
      set_update_in_progress(file.header());
    } else {
      publish_version(file.header(), live_.version);
    }
  }
}

void ShmStore::remove() const { dir_.remove_all(); }

std::string absolute_model_path(const std::string& path) {
  std::error_code error;
  const fs::path full = fs::absolute(path, error);
  if (error) return path;
  std::string out = full.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace shardload::serve
