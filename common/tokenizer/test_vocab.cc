// MakeTestVocab: a small byte-level BPE vocabulary learnt from built-in text.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/status.h"
#include "common/tokenizer/internal/byte_level.h"
#include "common/tokenizer/internal/pre_tokenizer.h"
#include "common/tokenizer/vocab_spec.h"

namespace moesplit {
namespace {

using tokenizer_internal::ByteEncode;
using tokenizer_internal::ByteToUnicode;
using tokenizer_internal::PreTokenizer;

// Original prose written for this project; plain English with some digits,
// punctuation and line breaks so the learnt merges look like a real
// vocabulary's first few hundred.
constexpr std::string_view kText =
    "The river that runs past the old mill is slow in summer and fast in "
    "spring. Every morning the miller walks along the bank, counts the ducks "
    "and looks at the water to see how high it has risen during the night. "
    "When the water is high, the wheel turns quickly and the stones grind "
    "more grain than the town can eat; when it is low, the miller sits by the "
    "door and mends the nets that his father left him.\n"
    "In the town there is a small library with a green door. The librarian "
    "keeps a list of every book that has been borrowed since the year 1921, "
    "and she says that the most popular book of all is a guide to the birds "
    "of the valley. Children come after school to read about the herons, the "
    "kingfishers and the owls that live in the tall trees near the church.\n"
    "On market day the square is full of people. Farmers bring apples, "
    "potatoes, cheese, honey and bread; a man from the coast sells fish from "
    "a cart, and a woman with a red hat sells wool that she has dyed herself "
    "with onion skins and walnut shells. Prices are written on small boards: "
    "3 apples for 1 coin, 12 eggs for 4 coins, a loaf for 2.\n"
    "Nobody in the town remembers who built the bridge. Some say it was the "
    "monks who lived in the abbey on the hill, others say it was a rich "
    "merchant who wanted to reach the market without getting his feet wet. "
    "The stones are worn smooth by the wheels of carts and the boots of "
    "travellers, and in the evening light they shine like polished silver.\n"
    "In winter the river sometimes freezes. Then the children slide on the "
    "ice, the miller rests, and the whole town gathers in the hall to sing, "
    "to dance and to tell stories about the years when the snow was so deep "
    "that the houses disappeared under it. The oldest people say that those "
    "winters were harder, but they also say that the bread tasted better and "
    "that the summers were longer. Perhaps both things are true; perhaps "
    "neither is. What is certain is that the river keeps flowing, the wheel "
    "keeps turning, and the town keeps telling its stories to anyone who "
    "will listen.\n"
    "\"Where does the water go?\" a child once asked the miller. He thought "
    "for a while and answered: \"To the sea, and from the sea to the sky, and "
    "from the sky back to the hills. It is always leaving and always coming "
    "home.\" The child was not sure this was a proper answer, but she wrote "
    "it down in her notebook anyway, between a drawing of a heron and a list "
    "of the things she wanted to find before the end of the holidays.\n";

struct Word {
  std::vector<std::string> symbols;  // byte-level code points, merged so far
  int64_t count = 0;
};

absl::StatusOr<std::vector<Word>> SplitWords() {
  ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre,
                   PreTokenizer::Create("qwen2"));
  std::vector<std::string_view> pieces;
  RETURN_IF_ERROR(pre->Split(kText, &pieces));
  absl::flat_hash_map<std::string, int64_t> counts;
  for (std::string_view piece : pieces) {
    std::string encoded;
    ByteEncode(piece, &encoded);
    ++counts[encoded];
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(),
                                                       counts.end());
  std::sort(sorted.begin(), sorted.end());  // a deterministic order
  std::vector<Word> words;
  for (const auto& [text, count] : sorted) {
    Word word;
    word.count = count;
    for (char c : std::string(text)) {
      // Continuation bytes join the code point they belong to.
      if ((static_cast<uint8_t>(c) & 0xC0) == 0x80 && !word.symbols.empty()) {
        word.symbols.back().push_back(c);
      } else {
        word.symbols.emplace_back(1, c);
      }
    }
    words.push_back(std::move(word));
  }
  return words;
}

// The most frequent adjacent pair as "left right"; ties go to the smallest
// key (byte-level text has no byte below '!', so comparing the joined key is
// comparing (left, right)). Returns false when no word has two symbols.
bool BestPair(const std::vector<Word>& words, std::string* best) {
  absl::flat_hash_map<std::string, int64_t> counts;
  for (const Word& word : words) {
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      counts[absl::StrCat(word.symbols[i], " ", word.symbols[i + 1])] +=
          word.count;
    }
  }
  int64_t best_count = 0;
  for (const auto& [key, count] : counts) {
    if (count > best_count || (count == best_count && key < *best)) {
      best_count = count;
      *best = key;
    }
  }
  return best_count > 0;
}

void ApplyMerge(std::string_view left, std::string_view right,
                std::vector<Word>* words) {
  for (Word& word : *words) {
    std::vector<std::string> merged;
    merged.reserve(word.symbols.size());
    for (size_t i = 0; i < word.symbols.size(); ++i) {
      if (i + 1 < word.symbols.size() && word.symbols[i] == left &&
          word.symbols[i + 1] == right) {
        merged.push_back(absl::StrCat(AbslView(left), AbslView(right)));
        ++i;
      } else {
        merged.push_back(std::move(word.symbols[i]));
      }
    }
    word.symbols = std::move(merged);
  }
}

// Learns merges until `n_new` new tokens exist or the text has none left.
absl::Status LearnMerges(int32_t n_new, VocabSpec* spec) {
  ASSIGN_OR_RETURN(std::vector<Word> words, SplitWords());
  absl::flat_hash_set<std::string> vocab(spec->tokens.begin(),
                                         spec->tokens.end());
  int32_t added = 0;
  std::string best;
  while (added < n_new && BestPair(words, &best)) {
    const size_t space = best.find(' ');
    const std::string left = best.substr(0, space);
    const std::string right = best.substr(space + 1);
    ApplyMerge(left, right, &words);
    spec->merges.push_back(best);
    std::string joined = left + right;
    if (vocab.insert(joined).second) {
      spec->tokens.push_back(std::move(joined));
      spec->types.push_back(TokenType::kNormal);
      ++added;
    }
    best.clear();
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view TestVocabText() { return kText; }

absl::StatusOr<VocabSpec> MakeTestVocab(int32_t n_vocab) {
  return MakeTestVocab(n_vocab, TestVocabStyle::kChatMl);
}

absl::StatusOr<VocabSpec> MakeTestVocab(int32_t n_vocab, TestVocabStyle style) {
  static constexpr const char* kChatMlSpecials[] = {"<|endoftext|>", "<|im_start|>",
                                                    "<|im_end|>"};
  static constexpr const char* kHarmonySpecials[] = {
      "<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
      "<|start|>",       "<|end|>",       "<|message|>", "<|call|>"};
  const bool harmony = style == TestVocabStyle::kHarmony;
  const absl::Span<const char* const> specials =
      harmony ? absl::Span<const char* const>(kHarmonySpecials)
              : absl::Span<const char* const>(kChatMlSpecials);
  const int32_t kSpecials = static_cast<int32_t>(specials.size());
  constexpr int32_t kMaxVocab = 1 << 24;
  if (n_vocab < 256 + kSpecials || n_vocab > kMaxVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "test vocabulary size ", n_vocab, " outside [", 256 + kSpecials, ", ",
        kMaxVocab, "] (256 byte tokens + ", kSpecials, " specials at least)"));
  }
  VocabSpec spec;
  spec.pre = harmony ? "gpt-4o" : "qwen2";
  for (int b = 0; b < 256; ++b) {
    spec.tokens.emplace_back(ByteToUnicode(static_cast<uint8_t>(b)));
    spec.types.push_back(TokenType::kNormal);
  }
  RETURN_IF_ERROR(LearnMerges(n_vocab - 256 - kSpecials, &spec));
  for (int32_t k = 0; static_cast<int32_t>(spec.tokens.size()) <
                      n_vocab - kSpecials;
       ++k) {
    spec.tokens.push_back(absl::StrCat("<|unused_", k, "|>"));
    spec.types.push_back(TokenType::kUnused);
  }
  for (const char* special : specials) {
    spec.tokens.emplace_back(special);
    spec.types.push_back(TokenType::kControl);
  }
  if (harmony) {
    spec.bos = n_vocab - kSpecials;
    spec.pad = n_vocab - kSpecials + 1;
    spec.eos = n_vocab - kSpecials + 2;
  } else {
    spec.bos = spec.pad = n_vocab - 3;
    spec.eos = n_vocab - 1;
  }
  RETURN_IF_ERROR(ValidateVocabSpec(spec));
  return spec;
}

}  // namespace moesplit
