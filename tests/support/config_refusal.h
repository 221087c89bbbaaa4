#pragma once

// A config.json that ModelConfig::from_json must refuse, naming the field.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload::testing {

inline void expect_config_refused_naming(const nlohmann::json& config, const std::string& field) {
  try {
    ModelConfig::from_json(config);
    ADD_FAILURE() << field << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

}  // namespace shardload::testing
