// The support matrix plans make-tiny's config.json of each family and format, not a checkpoint: its
// answers must be those a real checkpoint of the same family and format gets from
// check_engine_plan.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/support.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

const FamilySupport& row_of(const std::vector<FamilySupport>& matrix, const std::string& family) {
  for (const FamilySupport& row : matrix) {
    if (row.family == family) return row;
  }
  throw std::runtime_error("no row for " + family);
}

const FormatSupport& format_of(const FamilySupport& row, const std::string& format) {
  for (const FormatSupport& f : row.formats) {
    if (f.format == format) return f;
  }
  throw std::runtime_error("no format " + format + " in " + row.family);
}

bool accepts(const Plan& plan, const SupportTarget& target) {
  try {
    check_engine_plan(plan, target.engine, target.use);
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(SupportMatrix, HasEveryFamilyInEveryFormatMakeTinyKnows) {
  const std::vector<FamilySupport> matrix = support_matrix();
  ASSERT_EQ(matrix.size(), tiny_architectures().size());
  for (size_t i = 0; i < matrix.size(); ++i) {
    const FamilySupport& row = matrix[i];
    EXPECT_EQ(row.family, tiny_architectures()[i]);
    EXPECT_TRUE(format_of(row, "bf16").loads.yes) << row.family;
    for (const FormatSupport& format : row.formats) {
      // Every no says why; the targets are asked only of what loads.
      EXPECT_EQ(format.loads.yes, format.loads.reasons.empty())
          << row.family << " " << format.format;
      EXPECT_EQ(format.targets.size(), format.loads.yes ? std::size(kSupportTargets) : 0u)
          << row.family << " " << format.format;
      for (const SupportCell& cell : format.targets) {
        EXPECT_TRUE(cell.yes || cell.reasons.size() == 1) << row.family << " " << format.format;
      }
    }
  }
}

TEST(SupportMatrix, FormatsAreThoseMakeTinyWritesAndThePlannerPlans) {
  const std::vector<FamilySupport> matrix = support_matrix();
  EXPECT_TRUE(format_of(row_of(matrix, "gpt_oss"), "mxfp4").loads.yes);
  const FormatSupport& llama_mxfp4 = format_of(row_of(matrix, "llama"), "mxfp4");
  EXPECT_FALSE(llama_mxfp4.loads.yes);
  const FormatSupport& llama4_fp8 = format_of(row_of(matrix, "llama4"), "fp8");
  EXPECT_FALSE(llama4_fp8.loads.yes);
  ASSERT_EQ(llama4_fp8.loads.reasons.size(), 1u);
  EXPECT_NE(llama4_fp8.loads.reasons[0].find("no FP8 checkpoints"), std::string::npos)
      << llama4_fp8.loads.reasons[0];
}

// A real checkpoint (the family's default model, dense layers included) is taken exactly where the
// matrix says "yes" with no condition.
TEST(SupportMatrix, AgreesWithCheckEnginePlanOnRealCheckpoints) {
  const std::vector<FamilySupport> matrix = support_matrix();
  const std::pair<const char*, const char*> cases[] = {
      {"llama", "fp8-block"}, {"qwen3_moe", "none"},        {"qwen3_moe", "fp8"},
      {"deepseek_v3", "fp8"}, {"deepseek_v3", "fp8-block"}, {"glm4_moe", "none"},
  };
  for (const auto& [family, quant] : cases) {
    TempDir dir;
    make_tiny({.arch = family, .out = dir.file("model"), .quant = quant});
    const Plan plan = make_plan(Checkpoint::open(dir.file("model")), ParallelConfig{});
    const FormatSupport& format =
        format_of(row_of(matrix, family), std::string(quant) == "none" ? "bf16" : quant);
    ASSERT_TRUE(format.loads.yes) << family << " " << quant;
    for (size_t t = 0; t < std::size(kSupportTargets); ++t) {
      const SupportCell& cell = format.targets[t];
      EXPECT_EQ(accepts(plan, kSupportTargets[t]), cell.yes && cell.reasons.empty())
          << family << " " << quant << " " << support_target_label(kSupportTargets[t]);
    }
  }
}

}  // namespace
}  // namespace shardload
