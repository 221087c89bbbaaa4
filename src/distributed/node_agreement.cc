// Every node learns how a step went on every other: one gather of each node's outcome, so that an
// error on one node is the same error, naming it, on all of them.
#include <fmt/format.h>
#include <xxhash.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "distributed/peer_failed.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload {
namespace {

// A peer's error as it travels: the kind by name and every detail. A node that only stopped because
// a peer failed sends "stopped" and is never the one reported.
std::string encode_error(const Error& error) {
  const ErrorDetails& d = error.details();
  return nlohmann::json{{"kind", std::string(error_kind_name(error.kind()))},
                        {"message", error.message()},
                        {"file", d.file},
                        {"tensor", d.tensor},
                        {"field", d.field},
                        {"expected", d.expected},
                        {"found", d.found}}
      .dump();
}

ErrorKind kind_from_name(const std::string& name) {
  for (int k = 0; k <= static_cast<int>(ErrorKind::kInternal); ++k) {
    if (error_kind_name(static_cast<ErrorKind>(k)) == name) return static_cast<ErrorKind>(k);
  }
  return ErrorKind::kNode;
}

constexpr size_t kMaxOutcomeBytes =
    64 << 10;  // an error's text; a peer's message is bounded like any input

// A peer's outcome as an Error; one that is not what encode_error writes is an error of its own,
// never quoted.
Error decode_error(const std::string& text, int node, int nodes) {
  const std::string who = fmt::format("node {} of {}", node, nodes);
  try {
    if (text.size() > kMaxOutcomeBytes) throw std::length_error("too long");
    const nlohmann::json j = nlohmann::json::parse(text);
    const auto field = [&](const char* name) { return j.at(name).get<std::string>(); };
    return Error(kind_from_name(field("kind")), fmt::format("{}: {}", who, field("message")),
                 {.file = field("file"),
                  .tensor = field("tensor"),
                  .field = field("field"),
                  .expected = field("expected"),
                  .found = field("found")});
  } catch (const std::exception&) {
    return Error(ErrorKind::kNode,
                 fmt::format("{} failed and sent an outcome that is not one", who),
                 {.expected = "an error as JSON", .found = fmt::format("{} bytes", text.size())});
  }
}

constexpr const char* kStopped = "stopped";

}  // namespace

// A step that stops because a peer failed throws PeerFailed: its node reports kStopped.
void run_on_every_node(Transport& transport, const std::function<void()>& step) {
  std::string outcome;
  try {
    step();
  } catch (const PeerFailed&) {
    outcome = kStopped;
  } catch (const Error& error) {
    outcome = encode_error(error);
  } catch (const std::exception& error) {
    outcome = encode_error(Error(ErrorKind::kInternal, error.what()));
  }
  const std::vector<std::string> outcomes = transport.all_gather(outcome);
  for (size_t n = 0; n < outcomes.size(); ++n) {
    if (!outcomes[n].empty() && outcomes[n] != kStopped) {
      throw decode_error(outcomes[n], static_cast<int>(n), transport.nodes());
    }
  }
  for (const std::string& o : outcomes) {
    if (!o.empty())
      throw Error(ErrorKind::kNode, "a node stopped for a peer's error that no node reported");
  }
}

void check_same_plan(Transport& transport, const Plan& plan) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const auto add = [&](const void* data, size_t size) { XXH3_64bits_update(state, data, size); };
  for (const PlanSource& src : plan.sources) {
    add(src.name.data(), src.name.size() + 1);
    const uint64_t words[] = {src.file, src.file_offset, static_cast<uint64_t>(src.dtype), src.rows,
                              src.cols};
    add(words, sizeof(words));
  }
  for (const RankPlan& rank : plan.ranks) add(&rank.bytes, sizeof(rank.bytes));
  const std::string mine = fmt::format("{:016x}", XXH3_64bits_digest(state));
  XXH3_freeState(state);
  const std::vector<std::string> all = transport.all_gather(mine);
  for (size_t n = 0; n < all.size(); ++n) {
    if (all[n] != all[0]) {
      throw Error(
          ErrorKind::kConflict,
          fmt::format(
              "node {} of {} planned other checkpoint tensors or another layout than node 0 "
              "(is the checkpoint path another checkpoint there?)",
              n, all.size()),
          {.expected = all[0], .found = all[n]});
    }
  }
}

}  // namespace shardload
