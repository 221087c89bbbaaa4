#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/manifest.h"
#include "serve/shm_dir.h"
#include "serve/shm_rank_file.h"
#include "shardload/checkpoint.h"
#include "shardload/reload.h"
#include "shardload/serve.h"

namespace shardload::serve {

// The model path as the server records it (manifest, /get_model_info): absolute, normalized,
// without a trailing slash, so that a reader or a restart in another directory finds the same
// checkpoint. Used for the start-up path and for every update's model_path alike. A path that
// cannot be made absolute (no working directory) is returned as given; opening it then fails and
// says so.
std::string absolute_model_path(const std::string& path);

// The served model in shared memory: the locked directory shm_dir(NAME), one mapped file per rank
// whose tensor area is the live rank buffer, and the manifest kept in step with the live model. On
// several nodes (ServeOptions::transport), each node's store holds its block of ranks in
// node_shm_dir, and starting is collective: the nodes reuse what they hold only when every node
// can, at one version, else every node loads again (striped reads) above the highest version any
// node shows.
class ShmStore {
 public:
  // Opens the directory safely (ShmDir: refused when it is a link, another user's or writable by
  // others), locks it (a second server on the same NAME is refused), then reuses what it holds when
  // the manifest matches and every header is clean, or loads the checkpoint into it with a version
  // above every one the directory shows (versions never go back while the directory lives). A
  // failed start removes the directory unless options.keep (a refused one is left alone). Throws
  // Error.
  explicit ShmStore(const ServeOptions& options);
  ~ShmStore();
  ShmStore(const ShmStore&) = delete;
  ShmStore& operator=(const ShmStore&) = delete;

  LiveModel& live() { return live_; }
  // The transport between the nodes; nullptr on one node.
  Transport* transport() const { return transport_; }
  const NodeScope& scope() const { return scope_; }
  ReadPolicy read_policy() const { return read_; }
  const LiveModel& live() const { return live_; }
  const std::string& dir() const { return dir_.path(); }
  const std::string& note() const { return note_; }
  bool reused() const { return reused_; }

  // Update options whose begin/end hooks move every rank's sequence word (odd during each commit
  // group).
  UpdateOptions update_options();
  // Rewrites the manifest from the live model, then the headers: with update_in_progress, sets
  // every rank's flag (before the first commit group); without, publishes the live version and
  // clears it (after the last). Throws Error(kIo).
  void write_manifest(bool update_in_progress);
  // --device cuda (device_store.h): `sync` runs at the end of every commit group, before the
  // sequence words are even again; `cuda` is the manifest's "cuda" member. Empty: none.
  void set_device_hooks(std::function<void()> sync, nlohmann::json cuda) {
    device_sync_ = std::move(sync);
    device_manifest_ = std::move(cuda);
  }
  // Deletes the directory and its files, following no link (the mappings here stay valid until
  // destruction).
  void remove() const;

 private:
  // What an existing directory holds: why it cannot be reused as it is (empty: it can), the
  // highest version it shows, and the plan to reuse it under (its own expert map).
  struct Found {
    bool empty = false;
    std::string why;
    std::optional<uint64_t> seen;
    Plan plan;
  };
  Found examine(const Checkpoint& checkpoint, Plan plan, const ServeOptions& options,
                const std::string& model_path);
  // Whether every node can reuse what it holds at one version (one node: `found` alone); else
  // `seen` becomes the highest version any node shows and `why` the first node's reason.
  bool agree_on_reuse(Found& found);
  void adopt(Found found, const std::string& model_path);
  void open_or_load(const ServeOptions& options);
  void load(const Checkpoint& checkpoint, Plan plan, const std::string& model_path,
            uint64_t version);
  void remove_leftovers() const;
  // Runs `step` on this node and, on several, agrees on it (an error anywhere throws everywhere).
  void on_every_node(const std::function<void()>& step);

  std::string name_;
  Transport* transport_ = nullptr;
  NodeScope scope_;
  ReadPolicy read_ = ReadPolicy::kStriped;
  ShmDir dir_;
  std::string note_;
  bool reused_ = false;
  int threads_ = 0;
  uint64_t staging_bytes_ = 0;
  std::vector<ShmRankFile> files_;
  LiveModel live_;
  std::function<void()> device_sync_;
  nlohmann::json device_manifest_;
};

}  // namespace shardload::serve
