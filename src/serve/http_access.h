#pragma once

#include <string>
#include <string_view>

namespace shardload::serve {

// True when `authorization` (an Authorization header value) is "Bearer KEY" for this key. The
// scheme is case-insensitive (RFC 7235); the key is compared in time that depends only on the
// key's length, so that timing reveals nothing of how much of a guess was right.
bool bearer_matches(std::string_view authorization, std::string_view key);

// A new API key: 32 bytes from the kernel's random source, as 64 hex digits. Throws Error(kIo)
// when the kernel gives none.
std::string random_api_key();

}  // namespace shardload::serve
