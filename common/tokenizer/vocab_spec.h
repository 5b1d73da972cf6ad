// VocabSpec: the tokenizer half of a GGUF file, as plain data.
//
// A byte-level BPE vocabulary (llama.cpp `tokenizer.ggml.model = "gpt2"`) is
// stored under these GGUF keys (all written by WriteVocabSpec, read by
// ReadVocabSpec):
//   1. tokenizer.ggml.model          string  "gpt2"
//   2. tokenizer.ggml.pre            string  pre-tokenizer type, e.g. "qwen2"
//   3. tokenizer.ggml.tokens         [string] token texts in byte-level form
//   4. tokenizer.ggml.token_type     [int32]  per token, a TokenType value
//   5. tokenizer.ggml.merges         [string] "left right", rank = index
//   6. tokenizer.ggml.bos_token_id / eos_token_id / padding_token_id /
//      eot_token_id / eom_token_id   uint32, each optional
//   7. tokenizer.ggml.add_bos_token / add_eos_token  bool, optional (false)
//
// MakeTestVocab builds a small but complete vocabulary for generated test
// models: 256 byte tokens (id = byte value), merges learnt greedily from a
// built-in English text, padding if the text runs out of merges, and the
// specials <|endoftext|>, <|im_start|>, <|im_end|> as the last three ids.
//
// Thread-safe: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf/gguf.h"
#include "common/gguf/gguf_writer.h"

namespace moesplit {

// llama.cpp's llama_token_type (the values stored in tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabSpec {
  std::string model = "gpt2";
  std::string pre = "qwen2";
  std::vector<std::string> tokens;
  std::vector<TokenType> types;  // empty = every token kNormal
  std::vector<std::string> merges;
  int32_t bos = -1;  // -1: absent
  int32_t eos = -1;
  int32_t pad = -1;
  int32_t eot = -1;
  int32_t eom = -1;
  bool add_bos = false;
  bool add_eos = false;
};

// `model` may also be "gemma4" (Gemma 4's BPE over raw UTF-8: tokenizer.h);
// ReadVocabSpec then sets pre to "gemma4" and add_bos to true, as llama.cpp
// does whatever the file says.
//
// Checks the spec is writable and loadable: model "gpt2" or "gemma4", a supported pre
// type, non-empty unique tokens, types empty or one per token, every merge "left right" with both
// sides and their concatenation in the vocabulary, special ids in range,
// add_bos/add_eos only with a bos/eos id. InvalidArgument naming the problem.
absl::Status ValidateVocabSpec(const VocabSpec& spec);

// Reads the keys above. NotFound naming the key when tokens, merges or model
// is missing; InvalidArgument naming the key for a wrong value type, a
// token_type array shorter than tokens, or a model other than "gpt2". An id
// key out of range is ignored (-1), as llama.cpp does. A missing pre key
// reads as "". Does not check the pre type (Tokenizer does).
absl::StatusOr<VocabSpec> ReadVocabSpec(const GgufFile& gguf);

// Validates, then sets the keys above on `writer`. Absent ids are not
// written; add_bos_token always is, add_eos_token only when true.
absl::Status WriteVocabSpec(const VocabSpec& spec, GgufWriter* writer);

// A vocabulary of exactly `n_vocab` tokens (259 <= n_vocab <= 2^24, else
// InvalidArgument): ids 0..255 the bytes, then the tokens of up to
// n_vocab - 259 merges learnt from TestVocabText() with the "qwen2"
// pre-tokenizer (most frequent pair first, ties to the lexicographically
// smallest, so the result is deterministic; the text yields 610 merges), then
// `<|unused_N|>` tokens of type kUnused when the text has no more merges to
// give, then <|endoftext|> (bos, pad), <|im_start|>, <|im_end|> (eos), all
// kControl. add_bos and add_eos are false, like Qwen's. The layout is that of
// the qwen3moe-tiny fixture models (499 = 256 + 240 + 3).
absl::StatusOr<VocabSpec> MakeTestVocab(int32_t n_vocab);
// The specials a test vocabulary ends with: ChatML's three (above), or
// gpt-oss's harmony set (<|startoftext|> = bos, <|endoftext|> = pad,
// <|return|> = eos, <|constrain|>, <|channel|>, <|start|>, <|end|>,
// <|message|>, <|call|>) with the gpt-4o pre-tokenizer.
enum class TestVocabStyle { kChatMl, kHarmony };
absl::StatusOr<VocabSpec> MakeTestVocab(int32_t n_vocab, TestVocabStyle style);

// The English text MakeTestVocab learns from.
std::string_view TestVocabText();

}  // namespace moesplit
