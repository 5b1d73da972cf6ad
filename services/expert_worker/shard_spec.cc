#include "services/expert_worker/shard_spec.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moesplit::worker {
namespace {

absl::Status ParseRange(const std::string& what, const std::string& text, int* begin,
                        int* end) {
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  int a, b;
  if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &a) && a >= 0) {
    *begin = a;
    *end = a + 1;
    return absl::OkStatus();
  }
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &a) && absl::SimpleAtoi(parts[1], &b) &&
      a >= 0 && b >= a) {
    *begin = a;
    *end = b + 1;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--shard ", what, "=", text, ": expected A-B with 0 <= A <= B"));
}

}  // namespace

absl::StatusOr<ShardSpec> ParseShardSpec(const std::string& text) {
  ShardSpec spec;
  if (text.empty() || text == "all") return spec;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(text, ','))) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shard '", text, "': expected layers=A-B and/or experts=A-B"));
    }
    if (kv[0] == "layers") {
      if (absl::Status s = ParseRange("layers", kv[1], &spec.layer_begin, &spec.layer_end); !s.ok()) return s;
    } else if (kv[0] == "experts") {
      if (absl::Status s = ParseRange("experts", kv[1], &spec.expert_begin, &spec.expert_end); !s.ok()) return s;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--shard: unknown key '", kv[0], "' (expected layers or experts)"));
    }
  }
  return spec;
}

absl::StatusOr<ShardSpec> ResolveShard(ShardSpec spec, int n_layer, int n_expert) {
  if (spec.layer_end < 0) spec.layer_end = n_layer;
  if (spec.expert_end < 0) spec.expert_end = n_expert;
  if (spec.layer_end > n_layer || spec.layer_begin >= spec.layer_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard layers ", spec.layer_begin, "-", spec.layer_end - 1,
        " outside the model's layers 0-", n_layer - 1));
  }
  if (spec.expert_end > n_expert || spec.expert_begin >= spec.expert_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard experts ", spec.expert_begin, "-", spec.expert_end - 1,
        " outside the model's experts 0-", n_expert - 1));
  }
  return spec;
}

std::string LayerShardText(int index, int n, int n_layer) {
  const int begin = n_layer * index / n;
  const int end = n_layer * (index + 1) / n;
  return absl::StrCat("layers=", begin, "-", end - 1);
}

}  // namespace moesplit::worker
