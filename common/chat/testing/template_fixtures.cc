#include "common/chat/testing/template_fixtures.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace moesplit::chat::fixtures {
namespace {

namespace fs = std::filesystem;

// Beside the template first (the oracle's own renderings), then ours.
std::string Find(const std::string& name, const std::string& suffix) {
  for (const std::string& dir : {FixtureTemplatesDir(), RepoRenderingsDir()}) {
    const fs::path p = fs::path(dir) / (name + suffix);
    if (fs::exists(p)) return p.string();
  }
  return "";
}

}  // namespace

std::string FixtureTemplatesDir() {
  const char* env = std::getenv("MOESPLIT_FIXTURES_DIR");
  return (fs::path(env != nullptr && *env != '\0' ? env : MOESPLIT_FIXTURES_DIR) / "templates").string();
}

std::string RepoRenderingsDir() { return MOESPLIT_CHAT_RENDERINGS_DIR; }

std::vector<TemplateFixture> TemplateFixtures() {
  std::vector<TemplateFixture> out;
  std::set<std::string> names;
  // The oracle's first: a name in both places is the oracle's template.
  for (const std::string& dir : {FixtureTemplatesDir(), RepoRenderingsDir()}) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".jinja") continue;
      TemplateFixture f;
      f.name = entry.path().stem().string();
      if (!names.insert(f.name).second) continue;
      f.template_path = entry.path().string();
      f.expected_path = Find(f.name, ".expected.json");
      f.tools_expected_path = Find(f.name, ".tools.expected.json");
      out.push_back(std::move(f));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const TemplateFixture& a, const TemplateFixture& b) { return a.name < b.name; });
  return out;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace moesplit::chat::fixtures
