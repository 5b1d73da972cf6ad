#include "services/dense/volatile_system.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace moesplit::dense {

struct VolatileSystemFilter::Code {
  ~Code() { pcre2_code_free(code); }
  pcre2_code* code = nullptr;
};

absl::StatusOr<std::unique_ptr<VolatileSystemFilter>> VolatileSystemFilter::Create(
    const std::string& pattern) {
  auto code = std::make_unique<Code>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code->code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    return absl::InvalidArgumentError(absl::StrCat("--volatile-system-pattern: at offset ", offset,
                                                   ": ", reinterpret_cast<const char*>(buf)));
  }
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);  // without JIT it still matches
  return std::unique_ptr<VolatileSystemFilter>(new VolatileSystemFilter(std::move(code)));
}

VolatileSystemFilter::VolatileSystemFilter(std::unique_ptr<Code> code) : code_(std::move(code)) {}
VolatileSystemFilter::~VolatileSystemFilter() = default;

std::string VolatileSystemFilter::Strip(std::string_view text) const {
  // Removing never lengthens the text.
  std::string out(text.size() + 1, '\0');
  PCRE2_SIZE n = out.size();
  const int rc = pcre2_substitute(
      code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
      PCRE2_SUBSTITUTE_GLOBAL, nullptr, nullptr, reinterpret_cast<PCRE2_SPTR>(""), 0,
      reinterpret_cast<PCRE2_UCHAR*>(out.data()), &n);
  if (rc < 0) return std::string(text);
  out.resize(n);
  return out;
}

nlohmann::ordered_json VolatileSystemFilter::StripMessages(
    const nlohmann::ordered_json& messages) const {
  nlohmann::ordered_json out = messages;
  if (!out.is_array()) return out;
  for (auto& m : out) {
    if (!m.is_object()) continue;
    auto role = m.find("role");
    if (role == m.end() || (*role != "system" && *role != "developer")) continue;
    auto content = m.find("content");
    if (content == m.end()) continue;
    if (content->is_string()) {
      *content = Strip(content->get_ref<const std::string&>());
    } else if (content->is_array()) {
      nlohmann::ordered_json parts = nlohmann::ordered_json::array();
      for (auto& p : *content) {
        if (p.is_object() && p.value("type", "") == "text" && p.contains("text") &&
            p["text"].is_string()) {
          std::string t = Strip(p["text"].get_ref<const std::string&>());
          if (t.empty()) continue;
          p["text"] = std::move(t);
        }
        parts.push_back(std::move(p));
      }
      *content = parts.empty() ? nlohmann::ordered_json("") : std::move(parts);
    }
  }
  return out;
}

}  // namespace moesplit::dense
