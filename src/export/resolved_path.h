#pragma once

#include <filesystem>
#include <string>

namespace shardload {

// The absolute path with every symlink in its existing part resolved and no trailing separator, so
// that two spellings of one directory compare equal. Throws Error(kIo).
std::filesystem::path resolved_path(const std::string& path);

}  // namespace shardload
