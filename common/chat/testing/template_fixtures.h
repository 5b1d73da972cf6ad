// The chat-template fixtures for tests: each <name>.jinja under
// $MOESPLIT_FIXTURES_DIR/templates (the oracle's, read-only) with
// llama.cpp's renderings of it, <name>.expected.json and
// <name>.tools.expected.json, found beside the template or, for the
// templates whose renderings this repository made itself
// (common/chat/testdata/template_renderings.py, llama-server's
// /apply-template), under common/chat/testdata/templates. A template with
// neither (one of a family not served yet) is listed without renderings.
// The templates the oracle does not hold that this repository keeps
// (common/chat/testdata/templates/<name>.jinja: Nemotron 3 Nano, Llama
// 3.1 / 3.3, copied from llama.cpp's models/templates) are listed too.
#pragma once

#include <string>
#include <vector>

namespace moesplit::chat::fixtures {

struct TemplateFixture {
  std::string name;           // "GLM-4.6"
  std::string template_path;  // <fixtures>/templates/<name>.jinja, or the repository's
  std::string expected_path;  // <name>.expected.json, or "" when none
  std::string tools_expected_path;  // <name>.tools.expected.json, or ""
};

// $MOESPLIT_FIXTURES_DIR (else the build's) + "/templates".
std::string FixtureTemplatesDir();
// The renderings this repository keeps (common/chat/testdata/templates).
std::string RepoRenderingsDir();

// Every template of FixtureTemplatesDir() and RepoRenderingsDir(), sorted
// by name.
std::vector<TemplateFixture> TemplateFixtures();

// The whole file (empty when it cannot be read).
std::string ReadTextFile(const std::string& path);

}  // namespace moesplit::chat::fixtures
