#include "common/sampling/grammar.h"

#include <utility>

#include <cstdio>
#include <cstdlib>
#include "absl/strings/str_cat.h"

namespace moesplit::grammar {

ByteSet& ByteSet::Add(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
  return *this;
}

ByteSet& ByteSet::Remove(uint8_t b) {
  bits[b >> 6] &= ~(uint64_t{1} << (b & 63));
  return *this;
}

uint32_t GrammarBuilder::Reserve(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  defined_.push_back(false);
  return static_cast<uint32_t>(rules_.size() - 1);
}

void GrammarBuilder::Define(uint32_t rule, std::vector<Sequence> alternatives) {
  GRAMMAR_CHECK(rule < rules_.size(), "rule id out of range");
  GRAMMAR_CHECK(!defined_[rule], "rule defined twice");
  GRAMMAR_CHECK(!alternatives.empty(), "rule without alternatives");
  for (const Sequence& a : alternatives) size_ += a.size() + 1;
  rules_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

uint32_t GrammarBuilder::Rule(std::string name, std::vector<Sequence> alternatives) {
  const uint32_t r = Reserve(std::move(name));
  Define(r, std::move(alternatives));
  return r;
}

Sequence GrammarBuilder::Literal(std::string_view text) {
  Sequence s;
  s.reserve(text.size());
  for (char c : text) s.push_back(Item::Bytes(ByteSet::Of(static_cast<uint8_t>(c))));
  return s;
}

std::string TokenBytes(std::string_view text) {
  std::string bytes(1, static_cast<char>(kTokenMark));
  bytes.append(text);
  bytes.push_back(static_cast<char>(kTokenMark));
  return bytes;
}

Item GrammarBuilder::Tag(std::string_view text) {
  auto it = tags_.find(text);
  if (it == tags_.end()) {
    const bool either = has_token_ == nullptr;  // the vocabulary is not known
    const bool token = either || has_token_(text);
    std::vector<Sequence> forms;
    if (token) forms.push_back(Literal(TokenBytes(text)));
    if (either || !token) forms.push_back(Literal(text));
    const uint32_t r = Rule("tag " + std::string(text), std::move(forms));
    it = tags_.emplace(std::string(text), r).first;
  }
  return Item::Ref(it->second);
}

Sequence GrammarBuilder::TextWithTags(std::string_view text,
                                      const std::vector<std::string_view>& tags) {
  Sequence out;
  size_t plain = 0;  // start of the literal run
  for (size_t i = 0; i < text.size();) {
    std::string_view tag;
    for (std::string_view t : tags) {
      if (!t.empty() && text.substr(i, t.size()) == t && t.size() > tag.size()) tag = t;
    }
    if (tag.empty()) {
      ++i;
      continue;
    }
    Append(out, Literal(text.substr(plain, i - plain)));
    out.push_back(Tag(tag));
    i += tag.size();
    plain = i;
  }
  Append(out, Literal(text.substr(plain)));
  return out;
}

uint32_t GrammarBuilder::Repeat(std::string name, const Sequence& item, int min, int max) {
  GRAMMAR_CHECK(min >= 0, "negative repeat count");
  GRAMMAR_CHECK(max < 0 || min <= max, "repeat min above max");
  const Item x = item.size() == 1 ? item[0] : Item::Ref(Rule(name + "-item", {item}));
  Sequence head(static_cast<size_t>(min), x);
  if (max < 0) {
    const uint32_t star = Reserve(name + "-star");
    Define(star, {{x, Item::Ref(star)}, {}});
    head.push_back(Item::Ref(star));
  } else if (max > min) {
    uint32_t opt = Rule(name + "-opt1", {{x}, {}});
    for (int j = 2; j <= max - min; ++j) {
      opt = Rule(absl::StrCat(name, "-opt", j), {{x, Item::Ref(opt)}, {}});
    }
    head.push_back(Item::Ref(opt));
  }
  return Rule(std::move(name), {std::move(head)});
}

absl::Status GrammarBuilder::CheckLeftRecursion() const {
  const size_t n = rules_.size();
  // Nullable rules (fixpoint).
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& a : rules_[r]) {
        bool all = true;
        for (const Item& it : a) all = all && it.is_ref && nullable[it.rule];
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Left corners: the rules an alternative can start with.
  std::vector<std::vector<uint32_t>> corners(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& a : rules_[r]) {
      for (const Item& it : a) {
        if (!it.is_ref) break;
        corners[r].push_back(it.rule);
        if (!nullable[it.rule]) break;
      }
    }
  }
  // A cycle among left corners (iterative DFS, colours 0/1/2).
  std::vector<uint8_t> colour(n, 0);
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (size_t start = 0; start < n; ++start) {
    if (colour[start] != 0) continue;
    stack.push_back({static_cast<uint32_t>(start), 0});
    colour[start] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == corners[r].size()) {
        colour[r] = 2;
        stack.pop_back();
        continue;
      }
      const uint32_t c = corners[r][next++];
      if (colour[c] == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar is left-recursive at '", names_[c],
            "' (a $ref cycle that consumes no input)"));
      }
      if (colour[c] == 0) {
        colour[c] = 1;
        stack.push_back({c, 0});
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::Build(uint32_t root) const {
  GRAMMAR_CHECK(root < rules_.size(), "root rule out of range");
  if (size_ > kMaxGrammarElements) {
    return absl::InvalidArgumentError(absl::StrCat("the grammar has ", size_,
                                                   " elements, more than the supported ",
                                                   kMaxGrammarElements));
  }
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (!defined_[r]) {
      return absl::InvalidArgumentError(absl::StrCat("rule '", names_[r], "' is not defined"));
    }
  }
  if (absl::Status s = CheckLeftRecursion(); !s.ok()) return s;
  auto g = std::make_shared<Grammar>();
  g->root_ = root;
  g->names_ = names_;
  g->elements_.reserve(size_);
  for (const auto& alternatives : rules_) {
    g->starts_.push_back(static_cast<uint32_t>(g->elements_.size()));
    g->alts_.emplace_back();
    for (size_t a = 0; a < alternatives.size(); ++a) {
      g->alts_.back().push_back(static_cast<uint32_t>(g->elements_.size()));
      for (const Item& it : alternatives[a]) {
        Element e;
        e.kind = it.is_ref ? ElementKind::kRef : ElementKind::kBytes;
        e.rule = it.rule;
        e.set = it.set;
        g->elements_.push_back(e);
      }
      Element end;
      end.kind = a + 1 == alternatives.size() ? ElementKind::kEnd : ElementKind::kAlt;
      g->elements_.push_back(end);
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

}  // namespace moesplit::grammar
