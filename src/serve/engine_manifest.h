// The manifest's engine tables (ServeOptions::engine), apart from manifest.cc, which the manifest
// fuzz target compiles without the export module.
#pragma once

#include <nlohmann/json.hpp>

#include "serve/manifest.h"
#include "shardload/export.h"
#include "shardload/plan.h"

namespace shardload::serve {

// The held ranks' tensors under `engine`'s names (ServeOptions::engine): per rank, [{name, dtype,
// shape, source (the served tensor it is made of, or null: a constant), source_shape, fill}], in
// engine_tensors' order. A source of fewer elements than the tensor fills its first ones; the rest,
// and a tensor without a source, is `fill`.
nlohmann::json engine_manifest_ranks(const Plan& plan, NodeRanks held, Engine engine);

}  // namespace shardload::serve
