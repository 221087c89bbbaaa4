#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardload::serve {

// "rank-3.bin": the file of rank 3 inside the shared-memory directory.
std::string rank_file_name(int rank);

// The sequence word of a mapped header page (kShmSequenceOffset, 8-aligned because the page is).
uint64_t load_sequence(const std::byte* header);

// Seqlock writer steps. begin: odd before the first byte of a commit changes (a word already odd,
// left by a commit that was killed, stays odd); end: even after the last byte, so a finished commit
// advances the word by 2.
void begin_sequence(std::byte* header);
void end_sequence(std::byte* header);

// Writes the magic and a zero sequence word into a new header page.
void init_header(std::byte* header);
bool has_magic(const std::byte* header);

}  // namespace shardload::serve
