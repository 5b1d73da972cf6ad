#include "services/cli/model_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::cli {
namespace {

constexpr int kGeneratorVersion = 2;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::string CacheDir() {
  if (std::string d = Env("MOESPLIT_CACHE_DIR"); !d.empty()) return d;
  if (std::string d = Env("XDG_CACHE_HOME"); !d.empty()) {
    return absl::StrCat(d, "/moesplit");
  }
  if (std::string d = Env("HOME"); !d.empty()) {
    return absl::StrCat(d, "/.cache/moesplit");
  }
  return "/tmp/moesplit-cache";
}

TestModelSpec DefaultTestModelSpec() {
  TestModelSpec spec = *PresetSpec("qwen3-30b-a3b");
  spec.n_layer = 2;
  spec.type = "Q4_K_M";
  spec.seed = 1;
  spec.name = "moesplit-test-qwen3-30b-a3b-2layers";
  return spec;
}

absl::StatusOr<std::string> EnsureDefaultTestModel(int threads,
                                                   std::FILE* log) {
  return EnsureTestModel(DefaultTestModelSpec(), threads, log);
}

TestModelSpec BenchTestModelSpec() {
  TestModelSpec spec = *PresetSpec("qwen3-30b-a3b");
  spec.n_layer = 4;
  spec.type = "Q4_K_M";
  spec.seed = 1;
  spec.name = "moesplit-test-qwen3-30b-a3b-4layers";
  return spec;
}

absl::StatusOr<std::string> EnsureTestModel(TestModelSpec spec, int threads,
                                            std::FILE* log) {
  spec.threads = threads;
  const std::string dir = CacheDir();
  const std::string path = absl::StrCat(
      dir, "/test-qwen3-30b-a3b-", spec.n_layer, "layers-",
      absl::AsciiStrToLower(spec.type), "-seed", spec.seed, "-v",
      kGeneratorVersion, ".gguf");
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return path;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create cache directory ", dir, ": ", ec.message()));
  }
  std::fprintf(log,
               "note: no --model given; writing a random-weight test model "
               "(Qwen3-30B-A3B shape, %lld layers, %s) to %s\n",
               static_cast<long long>(spec.n_layer), spec.type.c_str(),
               path.c_str());
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(WriteTestModel(spec, path, "note: writing the test model"));
  std::fprintf(log, "note: test model written in %.1f s\n",
               std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - start)
                   .count());
  return path;
}

}  // namespace moesplit::cli
