#include "services/dense/response_format.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/sampling/json_schema.h"

namespace moesplit::dense {

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileResponseFormat(
    const nlohmann::ordered_json& rf) {
  if (rf.is_null()) return nullptr;
  if (!rf.is_object()) return absl::InvalidArgumentError("response_format must be an object");
  auto type = rf.find("type");
  const std::string kTypes = "one of \"text\", \"json_object\", \"json_schema\"";
  if (type == rf.end() || !type->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("response_format.type must be ", kTypes));
  }
  const std::string t = type->get<std::string>();
  ConstraintSpec spec;
  if (t == "text") return nullptr;
  if (t == "json_object") {
    spec.kind = ConstraintSpec::Kind::kJsonObject;
  } else if (t == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) {
      return absl::InvalidArgumentError(
          "response_format.json_schema must be an object when type is \"json_schema\"");
    }
    if (auto n = js->find("name"); n != js->end() && !n->is_string()) {
      return absl::InvalidArgumentError("response_format.json_schema.name must be a string");
    }
    if (auto s = js->find("strict"); s != js->end() && !s->is_null()) {
      if (!s->is_boolean()) {
        return absl::InvalidArgumentError(
            "response_format.json_schema.strict must be true or false");
      }
      spec.strict = s->get<bool>();
    }
    auto schema = js->find("schema");
    if (schema == js->end()) {
      return absl::InvalidArgumentError("response_format.json_schema.schema is required");
    }
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.schema = *schema;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format.type must be ", kTypes, ", got \"", t, "\""));
  }
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = CompileConstraint(spec);
  if (!g.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format.json_schema: ", g.status().message()));
  }
  return g;
}

}  // namespace moesplit::dense
