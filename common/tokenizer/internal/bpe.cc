#include "common/tokenizer/internal/bpe.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::tokenizer_internal {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t start;  // byte offset in the word
  uint32_t len;    // 0 once merged into its left neighbour
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of left + right when the pair was queued
};

// Orders the queue so that top() is the lowest rank, then the leftmost pair
// (llm_bigram_bpe::comparator).
struct WorseBigram {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Bytes of the UTF-8 sequence a byte starts (llama.cpp unicode_len_utf8).
size_t Utf8Len(char c) {
  static constexpr size_t kLookup[] = {1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(c) >> 4];
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Build(
    const std::vector<std::string>& tokens,
    const std::vector<std::string>& merges) {
  BpeModel model;
  model.token_to_id_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " is empty"));
    }
    auto [it, inserted] =
        model.token_to_id_.try_emplace(tokens[i], static_cast<int32_t>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate token in vocabulary: '", tokens[i],
                       "' has ids ", it->second, " and ", i));
    }
  }
  model.ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& line = merges[i];
    if (line.size() < 2 || line.find(' ', 1) == std::string::npos) continue;
    model.ranks_.try_emplace(line, static_cast<int32_t>(i));
  }
  return model;
}

int32_t BpeModel::Find(std::string_view text) const {
  auto it = token_to_id_.find(AbslView(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

int32_t BpeModel::Rank(std::string_view left, std::string_view right,
                       std::string* buf) const {
  buf->assign(left);
  buf->push_back(' ');
  buf->append(right);
  auto it = ranks_.find(*buf);
  return it == ranks_.end() ? -1 : it->second;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out,
                          bool hex_bytes) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t len = std::min(word.size() - off, Utf8Len(word[off]));
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, off + len == word.size() ? -1 : index + 1,
                       static_cast<uint32_t>(off), static_cast<uint32_t>(len)});
    off += len;
  }
  const auto text = [&](int32_t i) {
    return word.substr(symbols[i].start, symbols[i].len);
  };

  std::priority_queue<Bigram, std::vector<Bigram>, WorseBigram> queue;
  std::string key;
  const auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t rank = Rank(text(left), text(right), &key);
    if (rank < 0) return;
    queue.push({rank, left, right, symbols[left].len + symbols[right].len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) {
    add_bigram(i - 1, i);
  }

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Symbols only grow, so unchanged lengths mean the pair is still current.
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) {
      continue;
    }
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text(i);
    const int32_t id = Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const auto b = static_cast<uint8_t>(c);
      const char hex[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const int32_t byte_id =
          Find(hex_bytes ? std::string_view(hex, 6) : std::string_view(&c, 1));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace moesplit::tokenizer_internal
