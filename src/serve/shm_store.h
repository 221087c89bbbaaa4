#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/manifest.h"
#include "load/file_access.h"
#include "serve/shm_dir.h"
#include "serve/shm_rank_file.h"
#include "shardload/checkpoint.h"
#include "shardload/reload.h"
#include "shardload/serve.h"

namespace shardload::serve {

// The model path as the server records it (manifest, /get_model_info): absolute, normalized,
// without a trailing slash, so that a reader or a restart in another directory finds the same
// checkpoint; a Hugging Face model id in the local cache, its snapshot folder (resolve_model_path).
// Used for the start-up path and for every update's model_path alike (with an update's revision:
// resolve_model_path's errors). A path that cannot be made absolute (no working directory) is
// returned as given; opening it then fails and says so.
std::string absolute_model_path(const std::string& arg, const std::string& revision = {});

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
  // Rewrites the manifest from the live model, then publishes the live version in every header and
  // clears its update flag (start-up, --device cuda). Throws Error(kIo).
  void write_manifest();

  // The commit protocol of every change of the served weights (an update or a rebalance, on one
  // node or several: docs/reload.md "The weight server's commit contract"):
  //   begin_change    the manifest says update_in_progress, then every header's flag is set; a
  //                   failure here changed nothing (throws Error(kIo) with the flags still clear);
  //   commit groups   (the caller) between the sequence words, advancing live().version;
  //   record_source   (the caller, when a group committed) where the new bytes came from;
  //   publish_change  always once begin_change succeeded, whatever happened in between: every
  //                   header gets the live version and its flag cleared first (readers never see a
  //                   flag stuck), then the manifest is rewritten, twice at most. Never throws:
  //                   when the manifest cannot be written the headers still publish, the manifest
  //                   on disk keeps update_in_progress (so a restart reloads rather than trusting
  //                   it) and the returned warning says so; empty when all went well.
  void begin_change();
  std::string publish_change() noexcept;
  // Where the live bytes come from, every change since the last whole load or update (manifest
  // "sources"): a whole checkpoint (no filter, every commit group done) replaces the list; a
  // filtered or incomplete update adds to it. A restart reuses the directory only when every entry
  // names the checkpoint it is asked to serve, none is incomplete, and each one's recorded identity
  // (the files the bytes were read from: source_identity.h) is the checkpoint's identity now.
  // `identity`: the checkpoint as opened for the change (nullptr for an incomplete one).
  void record_source(const std::string& model_path, const WeightFilter& filter, bool complete,
                     const CheckpointIdentity* identity);
  const nlohmann::json& sources() const { return sources_; }
  // --device cuda (device_store.h): `sync` runs at the end of every commit group, before the
  // sequence words are even again; `cuda` is the manifest's "cuda" member. Empty: none.
  void set_device_hooks(std::function<void()> sync, nlohmann::json cuda) {
    device_sync_ = std::move(sync);
    device_manifest_ = std::move(cuda);
  }
  // DIR/api-key (kShmApiKeyName) made anew holding `key` (empty: removed, the API is open), with
  // the mode of the directory's files. Throws Error(kIo).
  void write_api_key(const std::string& key) const;
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
  void adopt(Found found, const std::string& model_path, const CheckpointIdentity& identity);
  void open_or_load(const ServeOptions& options);
  void load(const Checkpoint& checkpoint, Plan plan, const std::string& model_path,
            uint64_t version);
  // Double buffering, after a load into slot 0: slot 1 made a copy of it and handed to live_.spare.
  void fill_spare_slots();
  // The active slot word of each file, from where its live buffer is mapped.
  void store_active_slots();
  void remove_leftovers() const;
  // Node directories of this NAME on this host that no node of this server owns and no live server
  // holds (a job that ran on more nodes, --keep leftovers); on several nodes also what a server on
  // one node kept in the NAME's directory.
  void remove_stale_dirs() const;
  // The manifest of the live model, its sources and (--device cuda) its "cuda" member.
  nlohmann::json manifest(bool update_in_progress) const;
  // Runs `step` on this node and, on several, agrees on it (an error anywhere throws everywhere).
  void on_every_node(const std::function<void()>& step);

  std::string name_;
  Transport* transport_ = nullptr;
  NodeScope scope_;
  ReadPolicy read_ = ReadPolicy::kStriped;
  ShmDir dir_;
  ShmDir name_dir_;  // on several nodes, the lowest node of each host: shm_dir(NAME), locked
  load::UniqueFd server_lock_;  // dir_'s server.lock, held while this server lives
  load::UniqueFd name_lock_;    // name_dir_'s, on several nodes
  load::UniqueFd alive_;        // dir_'s server.alive, read-locked while this server lives
  std::vector<int> host_nodes_;  // the nodes of this server on this host
  std::string note_;
  bool reused_ = false;
  int threads_ = 0;
  uint64_t staging_bytes_ = 0;
  bool double_buffer_ = false;
  Engine engine_ = Engine::kLayout;
  // Double buffering: where slot 0 of each held rank is mapped, to tell which slot is live after a
  // swap (live_.ranks and live_.spare trade these mappings).
  std::vector<const std::byte*> slot0_;
  std::vector<ShmRankFile> files_;
  LiveModel live_;
  std::function<void()> device_sync_;
  nlohmann::json device_manifest_;
  nlohmann::json sources_ = nlohmann::json::array();
};

}  // namespace shardload::serve
