// The test model `moesplit generate` uses when no --model is given, kept in
// a cache directory so it is written once per machine.
//
// Directory: $MOESPLIT_CACHE_DIR, else $XDG_CACHE_HOME/moesplit, else
// $HOME/.cache/moesplit, else /tmp/moesplit-cache. The file name encodes the
// spec and a generator version, so a changed spec gets a new file.
//
// Thread-safe; concurrent processes are safe too (the model is written to a
// temporary name and renamed).
#pragma once

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "services/cli/test_model.h"

namespace moesplit::cli {

std::string CacheDir();

// Qwen3-30B-A3B's shape with 2 layers, Q4_K_M, seed 1.
TestModelSpec DefaultTestModelSpec();

// Qwen3-30B-A3B's shape with 4 layers, Q4_K_M, seed 1: `moesplit bench`'s
// default (the shape of the reference numbers in tests/bench/README.md).
TestModelSpec BenchTestModelSpec();

// The cached model of a Qwen3-30B-A3B-shaped `spec` (the file name encodes
// its layers, type and seed); written first when absent.
absl::StatusOr<std::string> EnsureTestModel(TestModelSpec spec, int threads,
                                            std::FILE* log);

// The cached default model's path; writes it first (with a note on `log`)
// when absent. Errors: PermissionDenied when the directory cannot be made,
// and those of WriteTestModel.
absl::StatusOr<std::string> EnsureDefaultTestModel(int threads,
                                                   std::FILE* log);

}  // namespace moesplit::cli
