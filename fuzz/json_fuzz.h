#pragma once

// What every JSON fuzz target checks: arbitrary bytes given to an entry point either parse or
// throw shardload::Error with a message; any other exception, a crash or a sanitizer report (a
// stack overflow from deep nesting among them) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "shardload/error.h"

namespace shardload::fuzz {

inline void check(bool condition) {
  if (!condition) std::abort();
}

template <typename Parse>
void parse_or_error(const uint8_t* data, size_t size, Parse&& parse) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    parse(text);
  } catch (const Error& error) {
    check(error.what()[0] != '\0');
  }
}

}  // namespace shardload::fuzz
