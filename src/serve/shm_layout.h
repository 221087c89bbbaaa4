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

// The header's version word and update-in-progress flag (kShmVersionOffset, kShmUpdateFlagOffset).
// set_update_in_progress(true) is a full barrier before the commit groups that follow;
// publish_version stores the version, then clears the flag with release order, so a reader that
// sees the flag clear (acquire) sees the version of the bytes.
uint64_t load_version(const std::byte* header);
bool load_update_in_progress(const std::byte* header);
void set_update_in_progress(std::byte* header);
void publish_version(std::byte* header, uint64_t version);

// Writes the magic and zero words into a new header page.
void init_header(std::byte* header);
// The active slot word (kShmActiveSlotOffset): release store by the writer between the sequence
// words, acquire load by readers.
uint64_t load_active_slot(const std::byte* header);
void store_active_slot(std::byte* header, uint64_t offset);
bool has_magic(const std::byte* header);

}  // namespace shardload::serve
