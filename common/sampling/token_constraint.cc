#include "common/sampling/token_constraint.h"

#include <algorithm>
#include <numeric>

#include <cstdio>
#include <cstdlib>
#include "absl/strings/str_cat.h"

namespace moesplit {

using grammar::ElementKind;
using grammar::Grammar;

absl::StatusOr<std::shared_ptr<const VocabIndex>> VocabIndex::Create(
    const std::vector<std::string>& pieces, const std::vector<bool>& usable,
    const std::vector<int32_t>& eog) {
  if (pieces.size() != usable.size() || pieces.empty() || pieces.size() > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary index: ", pieces.size(),
                                                   " pieces and ", usable.size(),
                                                   " usable flags"));
  }
  auto v = std::make_shared<VocabIndex>();
  v->n_vocab_ = static_cast<int32_t>(pieces.size());
  v->pieces_ = pieces;
  v->is_eog_.assign(pieces.size(), false);
  for (int32_t id : eog) {
    if (id < 0 || id >= v->n_vocab_) {
      return absl::InvalidArgumentError(
          absl::StrCat("end-of-generation id ", id, " outside [0, ", v->n_vocab_, ")"));
    }
    if (!v->is_eog_[id]) v->eog_.push_back(id);
    v->is_eog_[id] = true;
  }
  v->usable_.resize(pieces.size());
  std::vector<int32_t> order;
  for (int32_t id = 0; id < v->n_vocab_; ++id) {
    v->usable_[id] = usable[id] && !pieces[id].empty() && !v->is_eog_[id] &&
                     pieces[id].size() < UINT16_MAX;
    if (v->usable_[id]) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });
  // Preorder trie from the sorted pieces: `path` is the chain of open nodes.
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  auto close = [&](size_t keep) {
    while (path.size() > keep) {
      v->nodes_[path.back()].skip = static_cast<uint32_t>(v->nodes_.size());
      path.pop_back();
    }
  };
  for (int32_t id : order) {
    const std::string& p = pieces[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < path.size() && common < p.size() && (*prev)[common] == p[common]) ++common;
    }
    close(common);
    for (size_t k = common; k < p.size(); ++k) {
      const auto here = static_cast<uint32_t>(v->tokens_.size());
      path.push_back(static_cast<uint32_t>(v->nodes_.size()));
      v->nodes_.push_back({static_cast<uint8_t>(p[k]), static_cast<uint16_t>(k + 1), 0, here, here});
    }
    v->tokens_.push_back(id);
    v->nodes_[path.back()].tok_end = static_cast<uint32_t>(v->tokens_.size());
    v->max_depth_ = std::max<uint16_t>(v->max_depth_, static_cast<uint16_t>(p.size()));
    prev = &p;
  }
  close(0);
  return std::shared_ptr<const VocabIndex>(std::move(v));
}

bool VocabIndex::FiledAsSpecial(const Tokenizer& tok, int32_t id) {
  const TokenType t = tok.type(id);
  return (t == TokenType::kControl || t == TokenType::kUserDefined) && !tok.IsEndOfGeneration(id) &&
         !tok.Piece(id).empty();
}

grammar::TokenTest VocabIndex::SpecialTokenTest(const Tokenizer& tok) {
  return [&tok](std::string_view text) {
    const int32_t id = tok.FindToken(text);
    return id >= 0 && FiledAsSpecial(tok, id) && tok.Piece(id) == text;
  };
}

absl::StatusOr<std::shared_ptr<const VocabIndex>> VocabIndex::FromTokenizer(
    const Tokenizer& tok, int32_t n_vocab) {
  if (n_vocab < 0) n_vocab = tok.n_vocab();
  if (n_vocab < tok.n_vocab()) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", n_vocab,
                                                   " logits, the tokenizer ", tok.n_vocab(),
                                                   " tokens"));
  }
  std::vector<std::string> pieces(n_vocab);
  std::vector<bool> usable(n_vocab, false);
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    pieces[id] = tok.Piece(id);
    const TokenType t = tok.type(id);
    if (tok.IsEndOfGeneration(id) || pieces[id].empty()) continue;
    if ((t == TokenType::kNormal || t == TokenType::kByte) && !tok.IsControl(id)) {
      // A byte no UTF-8 text holds (the byte-level token for 0xFF) could
      // spell a special token's mark.
      usable[id] = pieces[id].find(static_cast<char>(grammar::kTokenMark)) == std::string::npos;
    } else if (FiledAsSpecial(tok, id)) {
      pieces[id] = grammar::TokenBytes(pieces[id]);
      usable[id] = true;
    }
  }
  return Create(pieces, usable, tok.EndOfGenerationIds());
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> g,
                                 std::shared_ptr<const VocabIndex> vocab, size_t max_states)
    : grammar_(std::move(g)), vocab_(std::move(vocab)), max_states_(max_states) {
  std::vector<const Node*> start;
  Continue(grammar_->rule_start(grammar_->root()), nullptr, &start, 0);
  current_ = Intern(start);
  walk_.resize(static_cast<size_t>(vocab_->max_depth_) + 1);
}

TokenConstraint::TokenConstraint(TokenConstraint&&) noexcept = default;
TokenConstraint& TokenConstraint::operator=(TokenConstraint&&) noexcept = default;
TokenConstraint::~TokenConstraint() = default;

const TokenConstraint::Node* TokenConstraint::Make(uint32_t pos, const Node* parent) {
  auto [it, fresh] = node_index_.try_emplace({pos, parent}, nullptr);
  if (fresh) {
    nodes_.push_back(Node{pos, parent});
    it->second = &nodes_.back();
  }
  return it->second;
}

// Matches from `pos`, then what `parent` continues with: pushes every stack
// whose top is a byte set (nullptr: the sentence is complete).
void TokenConstraint::Continue(uint32_t pos, const Node* parent, std::vector<const Node*>* out,
                               int depth) {
  GRAMMAR_CHECK(depth < 100000, "grammar expansion too deep");
  const grammar::Element& e = grammar_->at(pos);
  switch (e.kind) {
    case ElementKind::kAlt:
    case ElementKind::kEnd:
      if (parent == nullptr) {
        out->push_back(nullptr);
      } else {
        Continue(parent->pos, parent->parent, out, depth + 1);
      }
      return;
    case ElementKind::kBytes:
      out->push_back(Make(pos, parent));
      return;
    case ElementKind::kRef: {
      const bool tail = Grammar::IsEndOfAlternative(grammar_->at(pos + 1).kind);
      const Node* cont = tail ? parent : Make(pos + 1, parent);
      for (uint32_t a : grammar_->alternatives(e.rule)) Continue(a, cont, out, depth + 1);
      return;
    }
  }
}

int32_t TokenConstraint::Intern(std::vector<const Node*>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  auto it = state_index_.find(stacks);
  if (it != state_index_.end()) return it->second;
  State s;
  s.accepting = !stacks.empty() && stacks.front() == nullptr;
  s.has_bytes = stacks.size() > (s.accepting ? 1u : 0u);
  s.stacks = stacks;
  const auto id = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(s));
  state_index_.emplace(stacks, id);
  trans_.resize(states_.size() * 256, -2);
  return id;
}

int32_t TokenConstraint::Step(int32_t state, uint8_t byte) {
  const int32_t known = trans_[static_cast<size_t>(state) * 256 + byte];
  if (known != -2) return known;
  std::vector<const Node*>& out = scratch_;
  out.clear();
  for (const Node* n : states_[state].stacks) {
    if (n != nullptr && grammar_->at(n->pos).set.Has(byte)) {
      Continue(n->pos + 1, n->parent, &out, 0);
    }
  }
  const int32_t next = out.empty() ? -1 : Intern(out);
  trans_[static_cast<size_t>(state) * 256 + byte] = next;
  return next;
}

int32_t TokenConstraint::Walk(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    state = Step(state, static_cast<uint8_t>(c));
    if (state < 0) return -1;
  }
  return state;
}

void TokenConstraint::ComputeMask(int32_t state, std::vector<uint64_t>* out) {
  out->assign((static_cast<size_t>(vocab_->n_vocab_) + 63) / 64, 0);
  auto set = [&](int32_t id) { (*out)[id >> 6] |= uint64_t{1} << (id & 63); };
  if (states_[state].accepting) {
    for (int32_t id : vocab_->eog_) set(id);
  }
  if (!states_[state].has_bytes) return;
  const std::vector<VocabIndex::Node>& nodes = vocab_->nodes_;
  const int32_t* tokens = vocab_->tokens_.data();
  walk_[0] = state;
  size_t i = 0;
  while (i < nodes.size()) {
    const VocabIndex::Node& n = nodes[i];
    const int32_t t = Step(walk_[n.depth - 1], n.byte);
    if (t < 0) {
      i = n.skip;
      continue;
    }
    walk_[n.depth] = t;
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) set(tokens[k]);
    ++i;
  }
}

absl::Span<const uint64_t> TokenConstraint::AllowedTokens() {
  if (ended_) {
    ended_mask_.assign((static_cast<size_t>(vocab_->n_vocab_) + 63) / 64, 0);
    return ended_mask_;
  }
  if (states_[current_].mask < 0) {
    if (masks_.size() >= kMaxCachedMasks) {
      for (State& s : states_) s.mask = -1;
      masks_.clear();
    }
    masks_.emplace_back();
    ComputeMask(current_, &masks_.back());
    states_[current_].mask = static_cast<int32_t>(masks_.size() - 1);
  }
  return masks_[states_[current_].mask];
}

absl::Status TokenConstraint::Accept(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab_) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " outside [0, ", vocab_->n_vocab_, ")"));
  }
  if (ended_) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " after the end of the constrained output"));
  }
  if (vocab_->is_eog_[token]) {
    if (!complete()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "end-of-generation token ", token, " before the constrained output is complete"));
    }
    ended_ = true;
    return absl::OkStatus();
  }
  if (!vocab_->usable_[token]) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " is never allowed in constrained output"));
  }
  const int32_t next = Walk(current_, vocab_->pieces_[token]);
  if (next < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " does not continue the constrained output"));
  }
  current_ = next;
  MaybeCompact();
  return absl::OkStatus();
}

absl::Status TokenConstraint::AcceptBytes(std::string_view bytes) {
  const int32_t next = ended_ ? -1 : Walk(current_, bytes);
  if (next < 0) {
    return absl::InvalidArgumentError("the bytes do not continue the constrained output");
  }
  current_ = next;
  MaybeCompact();
  return absl::OkStatus();
}

bool TokenConstraint::CanAccept(std::string_view bytes) {
  return !ended_ && Walk(current_, bytes) >= 0;
}

bool TokenConstraint::complete() const { return ended_ || states_[current_].accepting; }

bool TokenConstraint::finished() const {
  return ended_ || (states_[current_].accepting && !states_[current_].has_bytes);
}

const TokenConstraint::Node* TokenConstraint::CopyInto(
    const Node* n, absl::flat_hash_map<const Node*, const Node*>* seen) {
  if (n == nullptr) return nullptr;
  if (auto it = seen->find(n); it != seen->end()) return it->second;
  const Node* copy = Make(n->pos, CopyInto(n->parent, seen));
  seen->emplace(n, copy);
  return copy;
}

void TokenConstraint::MaybeCompact() {
  if (states_.size() <= max_states_ && nodes_.size() <= kMaxNodes) return;
  std::deque<Node> old_nodes;
  old_nodes.swap(nodes_);  // keeps the old nodes alive while copying
  node_index_.clear();
  std::vector<const Node*> stacks = std::move(states_[current_].stacks);
  states_.clear();
  state_index_.clear();
  trans_.clear();
  masks_.clear();
  absl::flat_hash_map<const Node*, const Node*> seen;
  for (const Node*& n : stacks) n = CopyInto(n, &seen);
  current_ = Intern(stacks);
}

}  // namespace moesplit
