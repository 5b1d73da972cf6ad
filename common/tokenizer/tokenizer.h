// Tokenizer: byte-level BPE (llama.cpp `tokenizer.ggml.model = "gpt2"`), or
// Gemma 4's BPE over raw UTF-8 (`gemma4`, below), loaded from GGUF metadata,
// matching llama.cpp's llama_tokenize / llama_token_to_piece token for token.
//
// The `gemma4` model differs in step 2 of encoding: each raw-text piece has
// its spaces replaced by U+2581, is cut only into runs of newlines and runs
// of other characters (pre type `gemma4`, whatever tokenizer.ggml.pre says),
// a newline run that is a token is that token, and the rest BPE-merges over
// the UTF-8 characters themselves; a piece without a token falls back to the
// "<0xAB>" tokens of its bytes. BOS is always added (add_special). A normal
// token decodes to its text with U+2581 back to spaces.
//
// Encoding (llama_vocab::impl::tokenize for BPE vocabularies):
//   1. Special tokens are cut out of the text first (tokenizer_st_partition):
//      every token of type control, user-defined or unknown, longest text
//      first, splits the remaining raw-text pieces at each occurrence. With
//      parse_special = false, control and unknown tokens are NOT cut out
//      (their text is tokenized as ordinary text) but user-defined tokens
//      still are.
//   2. Each raw-text piece: invalid UTF-8 bytes become U+FFFD; the
//      pre-tokenizer named by `tokenizer.ggml.pre` cuts it into words
//      (internal/pre_tokenizer.h; supported: qwen2, deepseek-r1-qwen,
//      qwen35, gpt-4o, deepseek-v3; anything else is InvalidArgument); each
//      word is mapped to the GPT-2 byte-level alphabet and BPE-merged by
//      rank (internal/bpe.h).
//   3. With add_special, BOS is prepended iff tokenizer.ggml.add_bos_token
//      is true, EOS appended iff add_eos_token is true.
//
// Decoding (token_to_piece): a normal token is its text mapped back from the
// byte-level alphabet to bytes; control and unknown tokens render as their
// text when render_special is true and as nothing otherwise; user-defined
// tokens always render as their text; byte tokens ("<0xAB>") as their byte;
// unused/undefined tokens as nothing. Decode concatenates pieces (the result
// may be invalid UTF-8 when ids cut a character); StreamDecoder yields valid
// UTF-8 incrementally.
//
// End of generation (llama.cpp special_eog_ids): eos, eot, eom, and every
// token whose text is one of llama.cpp's end-of-turn texts (<|im_end|>,
// <|endoftext|>, <|eot_id|>, <|end|>, <end_of_turn>, ...) or FIM pad/repo/
// file-separator texts. Those tokens are treated as control tokens even when
// the file types them otherwise, as llama.cpp does (so in the Qwen2
// vocabulary the normal token "</s>" ends generation, renders only with
// render_special, and is cut out of text when parse_special is set).
// When the file names no eot id, eot() is the first of <|eot_id|>,
// <|im_end|>, ... present (llama.cpp picks among them in hash order).
//
// Not implemented (no supported pre type needs them): llama.cpp's
// clean_spaces decode pass, ignore_merges, LSTRIP/RSTRIP token attributes,
// the gpt-oss/gemma end-of-generation special cases. BPE defaults differ on
// purpose: a missing bos/eos id is -1 here (llama.cpp assumes 11). Invalid
// UTF-8 differs from llama.cpp only for overlong forms and surrogates
// (llama.cpp keeps them, here each of their bytes becomes U+FFFD).
//
// Thread-safe: a Tokenizer is immutable after construction; all const
// methods may be called concurrently. A StreamDecoder is not thread-safe and
// must not outlive its Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/vocab_spec.h"

namespace moesplit {

namespace tokenizer_internal {
class BpeModel;
class PreTokenizer;
}  // namespace tokenizer_internal

class Tokenizer {
 public:
  // Reads the tokenizer keys (vocab_spec.h) of `gguf`. Errors: those of
  // ReadVocabSpec; InvalidArgument for an unknown or missing pre type
  // (naming it), a duplicate or malformed token, add_bos/add_eos without the
  // id. The result does not reference `gguf`.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(
      const GgufFile& gguf);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSpec(
      const VocabSpec& spec);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes). `parse_special`: whether control tokens
  // written in the text (e.g. "<|im_start|>") become their ids. `add_special`:
  // whether BOS/EOS are added as the metadata asks (Qwen asks for neither).
  // User-defined tokens are cut out either way. Internal error only if PCRE2
  // fails to match (resource limits).
  // `limit`: stop as soon as more than `limit` ids are produced (a prompt
  // that cannot fit a context need not be tokenized in full); the result is
  // then an exact prefix of the full encoding with more than `limit` ids
  // (the word that crossed the limit is complete; no EOS is added).
  absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text, bool parse_special, bool add_special = true,
      size_t limit = SIZE_MAX) const;

  // The bytes of `ids`, concatenated. InvalidArgument naming the first id
  // outside [0, n_vocab) and the vocabulary size.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool render_special = true) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }  // -1 when absent
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  const std::string& pre_type() const;

  // False for ids outside [0, n_vocab).
  bool IsEndOfGeneration(int32_t id) const;
  // Control or unknown: rendered only when render_special. False outside
  // [0, n_vocab).
  bool IsControl(int32_t id) const;

  // REQUIRES for the id accessors below: 0 <= id < n_vocab().
  // The type stored in the file (before llama.cpp's control overrides).
  TokenType type(int32_t id) const { return types_[id]; }
  // The token's text as stored in the vocabulary (byte-level form).
  const std::string& TokenText(int32_t id) const { return tokens_[id]; }
  // The token's bytes as Decode renders it with render_special = true.
  const std::string& Piece(int32_t id) const { return pieces_[id]; }
  // The id whose vocabulary text is exactly `text`, or -1.
  int32_t FindToken(std::string_view text) const;
  // Every end-of-generation id, ascending.
  const std::vector<int32_t>& EndOfGenerationIds() const { return eog_ids_; }

 private:
  struct Fragment;
  struct WordCache;
  Tokenizer();
  absl::Status Init(const VocabSpec& spec);
  void InitAttributes();
  std::vector<Fragment> Partition(std::string_view text,
                                  bool parse_special) const;
  absl::Status EncodeText(std::string_view text, WordCache* cache,
                          size_t limit, std::vector<int32_t>* out) const;
  std::string RenderPiece(int32_t id) const;

  // Constant after construction.
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<uint32_t> attrs_;        // llama_token_attr bits per token
  std::vector<std::string> pieces_;    // rendered with render_special
  std::vector<int32_t> special_ids_;   // partition order: longest text first
  std::vector<int32_t> eog_ids_;
  std::vector<uint8_t> is_eog_;
  std::unique_ptr<tokenizer_internal::BpeModel> bpe_;
  std::unique_ptr<tokenizer_internal::PreTokenizer> pre_;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, pad_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  // The `gemma4` model: raw UTF-8 words with spaces as U+2581 (no
  // byte-level alphabet), "<0xAB>" byte fallback.
  bool raw_utf8_ = false;
};

// Turns a stream of token ids into text that is always valid UTF-8: bytes of
// a character split across tokens are held back until the character is
// complete; bytes that can never become valid are replaced by U+FFFD.
class StreamDecoder {
 public:
  // REQUIRES: `tokenizer` outlives this decoder.
  explicit StreamDecoder(const Tokenizer* tokenizer,
                         bool render_special = true);

  // Adds one token; returns the text completed by it (possibly empty).
  // InvalidArgument for an out-of-range id (the decoder is unchanged).
  absl::StatusOr<std::string> Push(int32_t id);

  // Returns what is held back, an incomplete character as one U+FFFD, and
  // resets the decoder.
  std::string Flush();

  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;  // at most 3 bytes of an incomplete character
};

}  // namespace moesplit
