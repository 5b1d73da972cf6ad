#include "common/model/testing/fixtures.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef MOESPLIT_FIXTURES_DIR
#define MOESPLIT_FIXTURES_DIR "../shared/fixtures"
#endif

namespace moesplit::model::testing {

std::string FixturesDir() {
  const char* env = std::getenv("MOESPLIT_FIXTURES_DIR");
  return env != nullptr ? env : MOESPLIT_FIXTURES_DIR;
}

std::string FixtureModelsDir() { return FixturesDir() + "/models"; }

std::vector<std::string> OracleFixtureModels() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(FixtureModelsDir(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.find("-tiny-") != std::string::npos && e.path().extension() == ".json") {
      names.push_back(name.substr(0, name.size() - 5));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

const std::vector<PendingEntry>& PendingFixtures() {
  static const auto* const kPending = new std::vector<PendingEntry>{
  };
  return *kPending;
}

const std::vector<PendingEntry>& PendingCudaFixtures() {
  static const auto* const kPending = new std::vector<PendingEntry>{
      {"gemma4-", "gemma4 on CUDA (per-layer attention geometry, RoPE divisors, V norm, GeGLU, "
                  "the extra FFN norms): issue #44"},
      {"nemotronh-", "nemotron_h_moe: CUDA Mamba-2, relu^2 experts and FFN-only layers (issue #44)"},
  };
  return *kPending;
}

namespace {
std::string_view Find(const std::vector<PendingEntry>& list, std::string_view name) {
  for (const PendingEntry& p : list) {
    if (name.substr(0, p.prefix.size()) == p.prefix) return p.reason;
  }
  return {};
}
}  // namespace

std::string_view PendingFixture(std::string_view name) { return Find(PendingFixtures(), name); }

std::string_view PendingOnCuda(std::string_view name) {
  return Find(PendingCudaFixtures(), name);
}

}  // namespace moesplit::model::testing
