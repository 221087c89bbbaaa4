#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "serve/shm_dir.h"
#include "shardload/distributed.h"
#include "shardload/plan.h"
#include "shardload/reload.h"

namespace shardload::serve {

// Which node of a server this directory belongs to: a server on N > 1 nodes (mpirun) keeps node n's
// ranks in shm_dir(NAME).node-n (docs/distributed.md "Weight server on several nodes").
struct NodeScope {
  int node = 0;
  int nodes = 1;
  NodeRanks held;  // the ranks of this directory
};

// The "ranks" member of manifest.json: per rank held its file name, file size and exported
// tensors (dtype, shape, offset from the start of the file, nbytes). Internal FP8 helper parameters
// are in the file but not listed: they are not part of the rank's export.
nlohmann::json manifest_ranks(const Plan& plan, NodeRanks held);

// The whole manifest (layout.md "Weight server shared memory"). `update_in_progress` is an
// extension: set while an update may be rewriting bytes, so that a server killed after a commit
// ended but before the manifest caught up is not mistaken for a clean one on restart. On N > 1
// nodes it adds node, nodes and node_ranks [first, last], and lists the node's ranks only.
nlohmann::json make_manifest(std::string_view name, const LiveModel& live, bool update_in_progress,
                             const NodeScope& scope);

// dp_size, attn_tp_size, dp_style and scopes (layout.md "Data-parallel attention"), added to `out`
// when the layout has them.
void add_dp_fields(const ParallelConfig& parallel, nlohmann::json& out);

// Temporary manifests are DIR/manifest.json.tmp-*: a server killed while writing one leaves it, and
// the next load removes it.
inline constexpr std::string_view kManifestTempPrefix = "manifest.json.tmp-";
// Bound on what read_manifest reads: far above any real layout's tensor table.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;

// Writes DIR/manifest.json through a new temporary file of a unique name (created exclusively,
// never through a link, with the directory's file mode), synced, renamed over the old one, and the
// directory synced: a reader, or a restart after a crash, sees the old manifest or the new one,
// never a part. Throws Error(kIo).
void write_manifest(const ShmDir& dir, const nlohmann::json& manifest);

// DIR/manifest.json parsed; nullopt, with the reason in `why`, when it is missing, not a regular
// file of this user, larger than kMaxManifestBytes or not a JSON object.
std::optional<nlohmann::json> read_manifest(const ShmDir& dir, std::string* why);
// The same from the file's text (nesting bounded as every JSON reader's).
std::optional<nlohmann::json> parse_manifest_text(std::string_view text, std::string* why);

}  // namespace shardload::serve
