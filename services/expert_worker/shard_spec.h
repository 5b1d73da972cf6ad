// ShardSpec: which routed experts an expert-worker owns.
//
//   --shard layers=A-B            layers A..B inclusive, every expert
//   --shard experts=A-B           experts A..B inclusive of every layer
//   --shard layers=A-B,experts=C-D   both
//   (a single number N means N-N)
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace moesplit::worker {

struct ShardSpec {
  // Half-open ranges; -1 = "to the end" before Resolve().
  int layer_begin = 0, layer_end = -1;
  int expert_begin = 0, expert_end = -1;
};

// InvalidArgument naming the part that does not parse.
absl::StatusOr<ShardSpec> ParseShardSpec(const std::string& text);

// Fills open ends and checks the ranges against the model's shape.
absl::StatusOr<ShardSpec> ResolveShard(ShardSpec spec, int n_layer, int n_expert);

// `n` shards splitting the layers as evenly as possible (for `moesplit up`).
std::string LayerShardText(int index, int n, int n_layer);

}  // namespace moesplit::worker
