#pragma once

#include <cstdint>

namespace shardload {

// Vocabulary-parallel tables (embed_tokens, lm_head) are padded with zero rows to a multiple of
// kVocabPadding before they are split over the TP ranks, as the engines lay them out; the rows past
// the vocabulary stay zero.
inline constexpr uint64_t kVocabPadding = 64;

inline uint64_t padded_vocab_rows(uint64_t rows) {
  return (rows + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
}

}  // namespace shardload
