#pragma once

// A make-tiny checkpoint and the layout a parametrized test loads it at (the device tests' cases).

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>

#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload::testing {

struct TinyCase {
  std::string arch;
  std::string quant;   // make-tiny --quant
  std::string scheme;  // --activation-scheme; "" for the default
  int tp;
  int ep;
};

inline void PrintTo(const TinyCase& c, std::ostream* os) {
  *os << c.arch << " " << c.quant << " " << c.scheme << " tp " << c.tp << " ep " << c.ep;
}

// The case as a test name: ARCH_QUANTSCHEME_tpTepE (the quant without its dashes).
inline std::string tiny_case_name(const TinyCase& c) {
  std::string quant = c.quant;
  std::erase(quant, '-');
  return c.arch + "_" + quant + c.scheme + "_tp" + std::to_string(c.tp) + "ep" +
         std::to_string(c.ep);
}

// The case's checkpoint, written into `dir` (ARCH-QUANTSCHEME, replacing one there) with values
// from `seed`; its path.
inline std::string make_tiny_case(const TempDir& dir, const TinyCase& c, uint64_t seed) {
  TinyOptions options;
  options.arch = c.arch;
  options.out = dir.file(c.arch + "-" + c.quant + c.scheme);
  options.seed = seed;
  options.quant = c.quant;
  options.activation_scheme = c.scheme;
  options.overwrite = true;
  make_tiny(options);
  return options.out;
}

}  // namespace shardload::testing
