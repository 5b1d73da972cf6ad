// Byte-level BPE merging (private to common/tokenizer).
//
// A BpeModel holds the vocabulary (token text -> id) and the merge ranks
// (`tokenizer.ggml.merges`, line i = rank i, "left right"). EncodeWord turns
// one pre-tokenized word, already in byte-level form, into token ids exactly
// as llama.cpp's llm_tokenizer_bpe_session does:
//   1. one symbol per code point of the word;
//   2. repeatedly merge the adjacent pair with the lowest rank (ties: the
//      leftmost pair) until no adjacent pair has a rank;
//   3. each symbol becomes its token; a symbol that is not a token falls back
//      to the tokens of its single bytes (byte-level: the byte's own text;
//      `hex_bytes`, Gemma's raw UTF-8 vocabularies: "<0xAB>"), and bytes
//      without a token are dropped (llama.cpp does the same; complete
//      byte-level vocabularies never get here).
//
// Thread-safe: immutable after Build; EncodeWord may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace moesplit::tokenizer_internal {

class BpeModel {
 public:
  // `tokens[i]` is the text of id i (unique, non-empty). Merge lines without
  // a space (at index >= 1) are ignored; a repeated line keeps its first rank.
  // InvalidArgument for a duplicate or empty token.
  static absl::StatusOr<BpeModel> Build(const std::vector<std::string>& tokens,
                                        const std::vector<std::string>& merges);

  // Appends the ids of `word` (byte-level text of one pre-token, or raw
  // UTF-8 with `hex_bytes`).
  void EncodeWord(std::string_view word, std::vector<int32_t>* out, bool hex_bytes = false) const;

  // Id of the token whose text is exactly `text`, or -1.
  int32_t Find(std::string_view text) const;

  size_t n_merges() const { return ranks_.size(); }

 private:
  int32_t Rank(std::string_view left, std::string_view right,
               std::string* buf) const;

  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  absl::flat_hash_map<std::string, int32_t> ranks_;  // "left right" -> rank
};

}  // namespace moesplit::tokenizer_internal
