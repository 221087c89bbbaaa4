// The pieces of the shared-memory contract that need no server: names that stay inside /dev/shm,
// and the sequence word's steps (a finished commit advances it by 2; a word left odd stays odd
// until a commit ends).
#include "serve/shm_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload {
namespace {

TEST(ShmLayoutTest, NamesStayInsideDevShm) {
  EXPECT_EQ(shm_dir("model-a_1.2"), "/dev/shm/shardload-model-a_1.2");
  for (const char* bad : {"", ".", "..", "a/b", "../x", "a b", "x\n"}) {
    EXPECT_THROW(shm_dir(bad), Error) << bad;
  }
  EXPECT_THROW(shm_dir(std::string(101, 'a')), Error);
  EXPECT_NO_THROW(shm_dir(std::string(100, 'a')));
}

TEST(ShmLayoutTest, HeaderHasTheMagicAndALittleEndianWord) {
  alignas(4096) std::byte page[4096] = {};
  EXPECT_FALSE(serve::has_magic(page));
  serve::init_header(page);
  EXPECT_TRUE(serve::has_magic(page));
  EXPECT_EQ(std::memcmp(page, "SHLDSHM1", 8), 0);
  EXPECT_EQ(serve::load_sequence(page), 0u);
  serve::begin_sequence(page);
  EXPECT_EQ(serve::load_sequence(page), 1u);
  EXPECT_EQ(std::to_integer<int>(page[8]), 1);  // little-endian: the low byte first
  serve::end_sequence(page);
  EXPECT_EQ(serve::load_sequence(page), 2u);
}

TEST(ShmLayoutTest, EachFinishedCommitAdvancesTheWordByTwo) {
  alignas(4096) std::byte page[4096] = {};
  serve::init_header(page);
  for (uint64_t commit = 1; commit <= 5; ++commit) {
    serve::begin_sequence(page);
    EXPECT_EQ(serve::load_sequence(page) % 2, 1u);
    serve::end_sequence(page);
    EXPECT_EQ(serve::load_sequence(page), 2 * commit);
  }
  EXPECT_EQ(serve::rank_file_name(3), "rank-3.bin");
}

TEST(ShmLayoutTest, AWordLeftOddStaysOddUntilACommitEnds) {
  alignas(4096) std::byte page[4096] = {};
  serve::init_header(page);
  serve::begin_sequence(page);  // a server killed here leaves 1
  serve::begin_sequence(page);  // the next one's reload begins: still odd, not 2
  EXPECT_EQ(serve::load_sequence(page), 1u);
  serve::end_sequence(page);
  EXPECT_EQ(serve::load_sequence(page), 2u);
  serve::end_sequence(page);  // an end without a begin changes nothing
  EXPECT_EQ(serve::load_sequence(page), 2u);
}

// The extensions after the sequence word: the version at byte 16, the update flag at byte 24, both
// little-endian words; bytes 0-15 stay as layout.md has them.
TEST(ShmLayoutTest, HeaderCarriesTheVersionAndTheUpdateFlag) {
  alignas(4096) std::byte page[4096] = {};
  serve::init_header(page);
  EXPECT_EQ(serve::load_version(page), 0u);
  EXPECT_FALSE(serve::load_update_in_progress(page));
  serve::set_update_in_progress(page);
  EXPECT_TRUE(serve::load_update_in_progress(page));
  EXPECT_EQ(std::to_integer<int>(page[kShmUpdateFlagOffset]), 1);
  serve::begin_sequence(page);
  serve::end_sequence(page);
  serve::publish_version(page, 0x0102);
  EXPECT_FALSE(serve::load_update_in_progress(page));
  EXPECT_EQ(serve::load_version(page), 0x0102u);
  EXPECT_EQ(std::to_integer<int>(page[kShmVersionOffset]), 0x02);  // the low byte first
  EXPECT_EQ(std::to_integer<int>(page[kShmVersionOffset + 1]), 0x01);
  EXPECT_EQ(std::memcmp(page, "SHLDSHM1", 8), 0);
  EXPECT_EQ(serve::load_sequence(page), 2u);
}

}  // namespace
}  // namespace shardload
