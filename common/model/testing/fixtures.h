// The oracle fixtures (../shared/fixtures, fixtures/README.md) as the tests
// see them: where they are, the tiny models with llama.cpp's logits, and
// which of those this build does not serve yet.
//
// The fixtures run ahead of the code: a family or format is added there
// before it is served here. Each such model is listed in PendingFixture
// with the work that brings it; the oracle tests report it as skipped with
// that reason (ctest and gtest count it as skipped, never as passed), and
// the oracle suite checks that every entry still names a fixture, so the
// list shrinks as the families land.
//
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moesplit::model::testing {

// $MOESPLIT_FIXTURES_DIR, else the build's MOESPLIT_FIXTURES_DIR.
std::string FixturesDir();
// FixturesDir() + "/models".
std::string FixtureModelsDir();

// The "<arch>-tiny-<type>" models that come with llama.cpp's logits (a
// .json beside the .gguf), sorted; pending ones included.
std::vector<std::string> OracleFixtureModels();

// Why fixture model `name` is not served yet (the family or format and the
// issue that brings it), or empty when it is served.
std::string_view PendingFixture(std::string_view name);

// The pending entries: (name prefix, reason).
struct PendingEntry {
  std::string_view prefix;
  std::string_view reason;
};
const std::vector<PendingEntry>& PendingFixtures();

// Why fixture model `name`, served on the CPU, is not served by the CUDA
// forward yet (CudaForward::Create refuses it with Unimplemented), or empty.
// The CUDA oracle tests skip it with that reason.
std::string_view PendingOnCuda(std::string_view name);
const std::vector<PendingEntry>& PendingCudaFixtures();

}  // namespace moesplit::model::testing
