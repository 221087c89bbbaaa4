#include "test_paths.h"

namespace shardload::testing {

const std::string& shardload_bin() {
  static const std::string path = SHARDLOAD_TEST_BIN;
  return path;
}

const std::string& source_dir() {
  static const std::string path = SHARDLOAD_TEST_SOURCE_DIR;
  return path;
}

const std::string& test_configs_dir() {
  static const std::string path = source_dir() + "/tests/data/configs";
  return path;
}

const std::string& lsan_mpi_suppressions() {
  static const std::string path = source_dir() + "/tests/distributed/lsan_mpi.supp";
  return path;
}

}  // namespace shardload::testing
