#include "cli/checkpoint_warnings.h"

#include <iostream>
#include <string>

namespace shardload::cli {

void print_warnings(const Checkpoint& checkpoint) {
  for (const std::string& warning : checkpoint.warnings()) {
    std::cerr << "warning: " << warning << "\n";
  }
}

}  // namespace shardload::cli
