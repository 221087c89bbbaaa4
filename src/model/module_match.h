#pragma once

#include <string>
#include <string_view>

namespace shardload {

// compressed-tensors' module matching (its `targets` and `ignore` entries): "re:PATTERN" matches a
// module name as Python's re.match does (from the start, not necessarily to the end); any other
// entry is a module name matched whole, except the class name "Linear", which matches every linear
// module. Patterns are compiled once per process (RE2: no backtracking, so a hostile pattern costs
// linear time).
bool module_matches(std::string_view entry, std::string_view module);

// Empty when `entry` is usable; else why not (a pattern RE2 does not accept, e.g. a lookahead).
std::string module_entry_error(std::string_view entry);

}  // namespace shardload
