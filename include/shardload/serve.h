#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/distributed.h"
#include "shardload/export.h"
#include "shardload/plan.h"
#include "shardload/tensor.h"
#include "shardload/transport.h"

namespace shardload {

// The shared-memory layout of docs/layout.md "Weight server shared memory":
// /dev/shm/shardload-NAME/rank-{r}.bin holds a header page, then the rank's tensors at the offsets
// that manifest.json lists (from the start of the file, 4096 + the plan offset).
inline constexpr uint64_t kShmHeaderBytes = 4096;
inline constexpr std::string_view kShmMagic = "SHLDSHM1";  // bytes 0-7 of every rank file
inline constexpr uint64_t kShmSequenceOffset = 8;  // little-endian uint64, odd while committing
// Extensions after the sequence word (layout.md keeps bytes 0-15 as they were). Both little-endian
// uint64 words, written with atomic stores: the version the bytes belong to once no update is in
// progress, and 1 from before the first commit group of an update (or a load) until after the last
// one and the manifest, else 0. A reader wanting a snapshot of the whole update checks both.
inline constexpr uint64_t kShmVersionOffset = 16;
inline constexpr uint64_t kShmUpdateFlagOffset = 24;
inline constexpr std::string_view kShmManifestFormat = "shardload-shm/1";
// Double buffering (ServeOptions::double_buffer): each rank file holds two slots of the rank's bytes,
// slot 0 at kShmHeaderBytes and slot 1 `slot_bytes` (the manifest's, a whole number of pages) after
// it; the little-endian uint64 word at kShmActiveSlotOffset is the byte offset to add to the
// manifest's tensor offsets to reach the live slot (0 or slot_bytes). An update writes the other slot
// and then, between the sequence words, stores the new offset: a reader that read the sequence word
// even before its copy and the same after it copied one whole version. The manifest's format is
// kShmDoubleBufferFormat, so that a reader knowing only the single layout refuses it.
inline constexpr uint64_t kShmActiveSlotOffset = 32;
// The slot size of a double-buffered rank file whose rank has `rank_bytes`: whole pages, so that each
// slot maps on its own.
inline constexpr uint64_t shm_slot_bytes(uint64_t rank_bytes) {
  return (rank_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}
inline constexpr std::string_view kShmDoubleBufferFormat = "shardload-shm/2";
// DIR/server.lock: a running server holds an exclusive flock on it for its whole life (the kernel
// drops it when the server dies), so that two servers never share a NAME. Mode 0600 whatever
// --shm-group: no other user can open it, so no reader can delay or deny a server's start.
inline constexpr std::string_view kShmServerLockName = "server.lock";
// DIR/server.alive: how readers tell a running server. The server holds a shared open-file-description
// lock (fcntl F_OFD_SETLK, F_RDLCK) on it for its whole life; a reader asks with F_OFD_GETLK whether a
// write lock would conflict, which takes no lock, sees the server from another PID namespace too, and
// cannot be turned into a refusal: a read lock never conflicts with the server's, and a reader cannot
// open it for writing. The directory's file mode (0600, or 0640 with --shm-group).
inline constexpr std::string_view kShmServerAliveName = "server.alive";
// DIR/api-key: the key every HTTP request but /health must carry ("Authorization: Bearer KEY"), made
// at start unless --api-key gives one or --insecure-no-api-key opens the API; readable by the
// directory's readers only (0600, or 0640 with --shm-group).
inline constexpr std::string_view kShmApiKeyName = "api-key";

// /dev/shm/shardload-NAME. Throws Error(kInvalidArgument) unless NAME is 1-100 of [A-Za-z0-9._-]
// and not "." or "..", so that it can never name a path outside /dev/shm.
std::string shm_dir(std::string_view name);
// The directory of node `node` of a server on `nodes` nodes: shm_dir(name) on one node,
// shm_dir(name) + ".node-" + node on several (nodes sharing a host never collide; a client finds
// its rank in the manifest that lists it, docs/distributed.md).
std::string node_shm_dir(std::string_view name, int node, int nodes);

struct ServeOptions {
  std::string model_path;
  ParallelConfig parallel;
  std::string name;            // the shared-memory directory is shm_dir(name)
  int port = 30000;            // 0: a free port chosen by the kernel
  int nodes = 1;               // EPLB server nodes N for POST /rebalance with expert_load
  bool keep = false;           // leave the shared memory when the server object is destroyed
  int threads = 0;             // loader and update threads; 0: one per core
  uint64_t staging_bytes = 0;  // bound on staged update bytes; 0: every update is one atomic commit
  // Two slots per rank file (kShmDoubleBufferFormat): an update is written once, into the slot readers
  // do not read, and published by switching slots, so readers wait for the switch alone. Costs a
  // second copy of every rank in /dev/shm (and no staging area). One node, CPU only, no staging bound;
  // its restart loads again (the directory is not reused).
  bool double_buffer = false;
  // "cuda": every rank also in GPU memory, exported as CUDA IPC handles (docs/gpu.md); device_map:
  // the GPU of each rank (empty: rank % GPUs).
  std::string device = "cpu";
  std::vector<int> device_map;
  // An engine (--engine vllm|sglang): the manifest also lists each rank's tensors under that engine's
  // names, dtypes and buffers (docs/engines.md), each made of a served tensor or a constant, so that a
  // reader fills the engine's parameters by their own names. The bytes are served once, as layout.md
  // has them. kLayout: layout.md's names only.
  Engine engine = Engine::kLayout;

  // Who may read the shared memory. Empty: only this user (directory 0700, files 0600). A group
  // name: its members too (directory 0750, files 0640, owned by that group).
  std::string shm_group;

  // HTTP access. `host`: the address to listen on (a numeric IPv4 or IPv6 address, or "localhost").
  // `api_key`: every request but GET/HEAD /health must carry "Authorization: Bearer API_KEY" and
  // is answered 401 otherwise. Empty: a key is made at start (32 random bytes, hex). Either way it
  // is written to DIR/api-key (kShmApiKeyName), which only the directory's readers (this user, and
  // the --shm-group) can read: by default only they can change the weights, whatever the address.
  // `insecure_no_api_key` (with an empty api_key): no key, every local user (every client that can
  // reach `host`) can change the weights.
  std::string host = "127.0.0.1";
  std::string api_key;
  bool insecure_no_api_key = false;

  // Several nodes (one process each, e.g. under mpirun): the transport between them (not owned;
  // nullptr or one node: a single-node server). Every node holds its block of ranks (node_ranks)
  // in node_shm_dir(name, node, nodes); node 0 serves the HTTP API for all of them and the others
  // follow its commands. `read`: who reads the checkpoint in loads and updates.
  Transport* transport = nullptr;
  ReadPolicy read = ReadPolicy::kStriped;
};

// The HTTP request limits of the weight server (docs/serve.md documents them).
inline constexpr size_t kServeMaxBodyBytes = size_t{64} << 20;  // an expert_load of thousands of layers
inline constexpr int kServeMaxConnections = 64;

// True for the loopback addresses ("localhost", 127.0.0.0/8, ::1, ::ffff:127.x.y.z): only processes
// on this machine can reach a server listening there.
bool is_loopback_host(std::string_view host);
// True when `host` is one that ServeOptions::host accepts.
bool is_valid_host(std::string_view host);
// True when `group` (a name or a numeric id) is one that ServeOptions::shm_group accepts.
bool is_known_group(const std::string& group);

// The weight server: rank weights in shared memory that other processes map, updated in place
// behind a per-file seqlock word, and an HTTP API (SGLang's endpoint names) on options.host:
//   GET  /health, /get_model_info, /weights_checksum
//   POST /update_weights_from_disk {model_path, weight_name_filter?, load_format?}
//   POST /rebalance {physical_to_logical_map} or {expert_load}
// Updates are serialized; a failed one changes nothing and answers HTTP 400 with success false.
// Every other answer is JSON too: 401 (API key), 404, 405 (with Allow), 411, 413 (with the limit),
// 415, 503 (more than kServeMaxConnections connections).
class WeightServer {
 public:
  // Reuses an existing shared-memory directory of the same name when its manifest matches this
  // model and layout and every sequence word is even; loads the checkpoint into it otherwise. Then
  // binds the port. Throws Error (bad options, checkpoint errors, another live server holding NAME,
  // a port in use).
  explicit WeightServer(const ServeOptions& options);
  // Removes the shared memory unless `keep`.
  ~WeightServer();
  WeightServer(const WeightServer&) = delete;
  WeightServer& operator=(const WeightServer&) = delete;

  int port() const;
  const std::string& dir() const;
  // One line on what start found: "reloading: <why>" when an existing directory could not be
  // reused, "reusing ...", or "loaded ...".
  const std::string& start_note() const;
  bool reused() const;

  // Serves requests until stop(); returns false when the listening socket failed.
  bool run();
  // Thread-safe; makes a running (or about to run) run() return once in-flight requests finish.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardload
