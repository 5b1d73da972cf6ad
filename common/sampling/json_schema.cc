#include "common/sampling/json_schema.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"

namespace moesplit {
namespace {

using grammar::ByteSet;
using grammar::GrammarBuilder;
using grammar::Item;
using grammar::Sequence;
using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 128;

const std::set<std::string>& Annotations() {
  static const auto* s = new std::set<std::string>{
      "title",   "description", "default", "examples", "$schema",  "$id",
      "$comment", "$defs",     "definitions", "deprecated", "readOnly", "writeOnly"};
  return *s;
}

const std::set<std::string>& Supported() {
  static const auto* s = new std::set<std::string>{
      "type",     "nullable", "properties", "required", "additionalProperties",
      "items",    "minItems", "maxItems",   "minLength", "maxLength",
      "enum",     "const",    "anyOf",      "oneOf",     "$ref"};
  return *s;
}

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("schema ", where, ": ", what));
}

// Compact JSON text; InvalidArgument for a string that is not UTF-8.
absl::StatusOr<std::string> Dump(const Json& j, const std::string& where) {
  try {
    return j.dump();
  } catch (const Json::exception& e) {
    return Bad(where, absl::StrCat("a value cannot be written as JSON: ", e.what()));
  }
}

}  // namespace

class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(GrammarBuilder* builder, const Json& root, bool strict)
      : b(*builder), root_(root), strict_(strict) {}

  absl::StatusOr<uint32_t> Value(const Json& schema, const std::string& where, int depth);
  uint32_t AnyObject() { return Lazy(any_object_, [&] { MakeAny(); }); }

  GrammarBuilder& b;

 private:
  uint32_t Lazy(uint32_t& slot, const std::function<void()>& make) {
    if (slot == kNone) make();
    return slot;
  }
  Item Ws() {
    return Item::Ref(Lazy(ws_, [&] {
      const uint32_t indent =
          b.Repeat("ws-indent", {Item::Bytes(ByteSet().Add(' ').Add('\t'))}, 0, 20);
      ws_ = b.Rule("ws", {{}, {Item::Bytes(ByteSet::Of(' '))},
                          {Item::Bytes(ByteSet::Of('\n')), Item::Ref(indent)}});
    }));
  }
  static Item Byte(char c) { return Item::Bytes(ByteSet::Of(static_cast<uint8_t>(c))); }
  uint32_t Char();
  uint32_t String(int min, int max);
  uint32_t Integer();
  uint32_t Number();
  uint32_t Any();
  void MakeAny();
  uint32_t Literal(const std::string& name, const std::vector<std::string>& texts);
  absl::StatusOr<uint32_t> Ref(const std::string& ref, const std::string& where, int depth);
  absl::StatusOr<uint32_t> Object(const Json& s, const std::string& where, int depth);
  absl::StatusOr<uint32_t> Array(const Json& s, const std::string& where, int depth);
  absl::StatusOr<uint32_t> MapObject(uint32_t value);
  // A list of values: open ws (item ws ("," ws item ws){min-1,max-1})? close.
  uint32_t List(const std::string& name, char open, char close, const Sequence& item, int min,
                int max);
  absl::Status CheckSize(const std::string& where) const {
    if (b.size() <= grammar::kMaxGrammarElements) return absl::OkStatus();
    return Bad(where, absl::StrCat("the schema needs a grammar of more than ",
                                   grammar::kMaxGrammarElements, " elements"));
  }

  static constexpr uint32_t kNone = UINT32_MAX;
  const Json& root_;
  const bool strict_;
  uint32_t ws_ = kNone, char_ = kNone, integer_ = kNone, number_ = kNone, value_ = kNone,
           any_object_ = kNone, any_array_ = kNone;
  std::map<std::pair<int, int>, uint32_t> strings_;
  std::map<std::string, uint32_t> refs_;
};

uint32_t JsonSchemaCompiler::Char() {
  return Lazy(char_, [&] {
    const ByteSet cont = ByteSet::Range(0x80, 0xBF);
    auto B = [](ByteSet s) { return Item::Bytes(s); };
    ByteSet plain = ByteSet::Range(0x20, 0x7F);
    plain.Remove('"').Remove('\\');
    ByteSet hex = ByteSet::Range('0', '9');
    hex.Add('a', 'f').Add('A', 'F');
    ByteSet esc;
    for (char c : std::string("\"\\/bfnrt")) esc.Add(static_cast<uint8_t>(c));
    char_ = b.Rule(
        "char",
        {{B(plain)},
         {B(ByteSet::Range(0xC2, 0xDF)), B(cont)},
         {B(ByteSet::Of(0xE0)), B(ByteSet::Range(0xA0, 0xBF)), B(cont)},
         {B(ByteSet::Range(0xE1, 0xEC)), B(cont), B(cont)},
         {B(ByteSet::Of(0xED)), B(ByteSet::Range(0x80, 0x9F)), B(cont)},
         {B(ByteSet::Range(0xEE, 0xEF)), B(cont), B(cont)},
         {B(ByteSet::Of(0xF0)), B(ByteSet::Range(0x90, 0xBF)), B(cont), B(cont)},
         {B(ByteSet::Range(0xF1, 0xF3)), B(cont), B(cont), B(cont)},
         {B(ByteSet::Of(0xF4)), B(ByteSet::Range(0x80, 0x8F)), B(cont), B(cont)},
         {Byte('\\'), B(esc)},
         {Byte('\\'), Byte('u'), B(hex), B(hex), B(hex), B(hex)}});
  });
}

uint32_t JsonSchemaCompiler::String(int min, int max) {
  auto [it, fresh] = strings_.try_emplace({min, max}, kNone);
  if (fresh) {
    const uint32_t chars =
        b.Repeat(absl::StrCat("string-chars-", min, "-", max), {Item::Ref(Char())}, min, max);
    it->second = b.Rule("string", {{Byte('"'), Item::Ref(chars), Byte('"')}});
  }
  return it->second;
}

uint32_t JsonSchemaCompiler::Integer() {
  return Lazy(integer_, [&] {
    const ByteSet digit = ByteSet::Range('0', '9');
    const uint32_t more = b.Repeat("integer-digits", {Item::Bytes(digit)}, 0, 15);
    const uint32_t part = b.Rule(
        "integer-part", {{Byte('0')}, {Item::Bytes(ByteSet::Range('1', '9')), Item::Ref(more)}});
    integer_ = b.Rule("integer", {{Item::Ref(part)}, {Byte('-'), Item::Ref(part)}});
  });
}

uint32_t JsonSchemaCompiler::Number() {
  return Lazy(number_, [&] {
    const Item digit = Item::Bytes(ByteSet::Range('0', '9'));
    const uint32_t frac_digits = b.Repeat("fraction-digits", {digit}, 1, 16);
    const uint32_t frac = b.Rule("fraction", {{}, {Byte('.'), Item::Ref(frac_digits)}});
    const uint32_t exp_digits = b.Repeat("exponent-digits", {digit}, 1, 2);
    const Item e = Item::Bytes(ByteSet().Add('e').Add('E'));
    const uint32_t exp = b.Rule(
        "exponent", {{},
                     {e, Item::Ref(exp_digits)},
                     {e, Item::Bytes(ByteSet().Add('-').Add('+')), Item::Ref(exp_digits)}});
    number_ = b.Rule("number", {{Item::Ref(Integer()), Item::Ref(frac), Item::Ref(exp)}});
  });
}

uint32_t JsonSchemaCompiler::List(const std::string& name, char open, char close, const Sequence& item,
                        int min, int max) {
  if (max == 0) return b.Rule(name, {{Byte(open), Ws(), Byte(close)}});
  Sequence with_ws = item;
  with_ws.push_back(Ws());
  Sequence more = {Byte(','), Ws()};
  GrammarBuilder::Append(more, with_ws);
  const uint32_t tail =
      b.Repeat(name + "-more", more, std::max(min - 1, 0), max < 0 ? -1 : max - 1);
  Sequence full = {Byte(open), Ws()};
  GrammarBuilder::Append(full, with_ws);
  full.push_back(Item::Ref(tail));
  full.push_back(Byte(close));
  if (min > 0) return b.Rule(name, {full});
  return b.Rule(name, {{Byte(open), Ws(), Byte(close)}, full});
}

void JsonSchemaCompiler::MakeAny() {
  value_ = b.Reserve("value");
  Sequence kv = {Item::Ref(String(0, -1)), Ws(), Byte(':'), Ws(), Item::Ref(value_)};
  any_object_ = List("object", '{', '}', kv, 0, -1);
  any_array_ = List("array", '[', ']', {Item::Ref(value_)}, 0, -1);
  b.Define(value_, {{Item::Ref(any_object_)},
                    {Item::Ref(any_array_)},
                    {Item::Ref(String(0, -1))},
                    {Item::Ref(Number())},
                    GrammarBuilder::Literal("true"),
                    GrammarBuilder::Literal("false"),
                    GrammarBuilder::Literal("null")});
}

uint32_t JsonSchemaCompiler::Any() { return Lazy(value_, [&] { MakeAny(); }); }

uint32_t JsonSchemaCompiler::Literal(const std::string& name, const std::vector<std::string>& texts) {
  std::vector<Sequence> alts;
  for (const std::string& t : texts) alts.push_back(GrammarBuilder::Literal(t));
  return b.Rule(name, std::move(alts));
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::Ref(const std::string& ref, const std::string& where,
                                       int depth) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#') {
    return Bad(where, absl::StrCat("$ref '", ref, "' is not local (only '#...' is supported)"));
  }
  const Json* target = nullptr;
  try {
    const Json::json_pointer ptr(ref.substr(1));
    if (root_.contains(ptr)) target = &root_.at(ptr);
  } catch (const Json::exception&) {
  }
  if (target == nullptr) return Bad(where, absl::StrCat("$ref '", ref, "' points nowhere"));
  const uint32_t id = b.Reserve(absl::StrCat("ref ", ref));
  refs_[ref] = id;
  ASSIGN_OR_RETURN(const uint32_t value, Value(*target, ref, depth + 1));
  b.Define(id, {{Item::Ref(value)}});
  return id;
}

static absl::StatusOr<int> Count(const Json& s, const char* key, int def, const std::string& where) {
  auto it = s.find(key);
  if (it == s.end()) return def;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return Bad(where, absl::StrCat(key, " must be a non-negative integer"));
  }
  if (it->get<int64_t>() > kMaxRepeat) {
    return Bad(where, absl::StrCat(key, " ", it->get<int64_t>(), " is above the supported ",
                                   kMaxRepeat));
  }
  return static_cast<int>(it->get<int64_t>());
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::MapObject(uint32_t value) {
  Sequence kv = {Item::Ref(String(0, -1)), Ws(), Byte(':'), Ws(), Item::Ref(value)};
  return List("map", '{', '}', kv, 0, -1);
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::Object(const Json& s, const std::string& where, int depth) {
  static const Json kEmpty = Json::object();
  const Json* props = &kEmpty;
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) return Bad(where, "properties must be an object");
    props = &*it;
  }
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return Bad(where, "required must be an array of property names");
    for (const Json& r : *it) {
      if (!r.is_string()) return Bad(where, "required must be an array of property names");
      if (!props->contains(r.get<std::string>())) {
        return Bad(where, absl::StrCat("required names '", r.get<std::string>(),
                                       "', which is not in properties"));
      }
      required.insert(r.get<std::string>());
    }
  }
  if (auto it = s.find("additionalProperties"); it != s.end() && *it != Json(false)) {
    if (!it->is_boolean() && !it->is_object()) {
      return Bad(where, "additionalProperties must be a boolean or a schema");
    }
    if (strict_) return Bad(where, "additionalProperties must be false when strict is true");
    if (!props->empty()) {
      return Bad(where,
                 "additionalProperties other than false together with properties is not "
                 "supported");
    }
    uint32_t value = 0;
    if (it->is_boolean()) {
      value = Any();
    } else {
      ASSIGN_OR_RETURN(value, Value(*it, where + "/additionalProperties", depth + 1));
    }
    return MapObject(value);
  }
  // R_first[i] / R_rest[i]: properties i.. with no / some property before.
  std::vector<std::pair<std::string, uint32_t>> kvs;
  for (const auto& [name, sub] : props->items()) {
    ASSIGN_OR_RETURN(const std::string key, Dump(Json(name), where));
    ASSIGN_OR_RETURN(const uint32_t v, Value(sub, where + "/properties/" + name, depth + 1));
    Sequence kv = GrammarBuilder::Literal(key);
    for (Item it : {Ws(), Byte(':'), Ws(), Item::Ref(v), Ws()}) kv.push_back(it);
    kvs.emplace_back(name, b.Rule(absl::StrCat("property ", name), {kv}));
  }
  uint32_t first = b.Rule("no-more-properties", {{}});
  uint32_t rest = first;
  for (size_t i = kvs.size(); i-- > 0;) {
    const Item kv = Item::Ref(kvs[i].second);
    const Sequence with_first = {kv, Item::Ref(rest)};
    const Sequence with_rest = {Byte(','), Ws(), kv, Item::Ref(rest)};
    if (required.count(kvs[i].first)) {
      first = b.Rule("properties", {with_first});
      rest = b.Rule("properties", {with_rest});
    } else {
      first = b.Rule("properties", {with_first, {Item::Ref(first)}});
      rest = b.Rule("properties", {with_rest, {Item::Ref(rest)}});
    }
  }
  return b.Rule("object", {{Byte('{'), Ws(), Item::Ref(first), Byte('}')}});
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::Array(const Json& s, const std::string& where, int depth) {
  uint32_t item = 0;
  auto it = s.find("items");
  if (it == s.end()) {
    item = Any();
  } else if (it->is_object() || it->is_boolean()) {
    ASSIGN_OR_RETURN(item, Value(*it, where + "/items", depth + 1));
  } else {
    return Bad(where, "items must be a schema (tuple arrays are not supported)");
  }
  ASSIGN_OR_RETURN(const int min, Count(s, "minItems", 0, where));
  ASSIGN_OR_RETURN(const int max, Count(s, "maxItems", -1, where));
  if (max >= 0 && min > max) return Bad(where, "minItems is above maxItems");
  return List("array", '[', ']', {Item::Ref(item)}, min, max);
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::Value(const Json& s, const std::string& where, int depth) {
  if (depth > kMaxDepth) return Bad(where, absl::StrCat("nested deeper than ", kMaxDepth));
  RETURN_IF_ERROR(CheckSize(where));
  if (s.is_boolean()) {
    if (!s.get<bool>()) return Bad(where, "the schema false accepts nothing");
    return Any();
  }
  if (!s.is_object()) return Bad(where, "a schema must be an object or a boolean");
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.items()) {
    if (Annotations().count(k)) continue;
    if (!Supported().count(k)) {
      return Bad(where, absl::StrCat("unsupported keyword '", k, "'"));
    }
    keys.push_back(k);
  }
  auto has = [&](const char* k) { return s.contains(k); };
  if (has("$ref")) {
    if (keys.size() > 1) return Bad(where, "$ref together with other keywords is not supported");
    if (!s["$ref"].is_string()) return Bad(where, "$ref must be a string");
    return Ref(s["$ref"].get<std::string>(), where, depth);
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!has(k)) continue;
    if (keys.size() > 1) {
      return Bad(where, absl::StrCat(k, " together with other keywords (",
                                     absl::StrJoin(keys, ", "),
                                     ") is not supported: move them into each branch"));
    }
    const Json& branches = s[k];
    if (!branches.is_array() || branches.empty()) {
      return Bad(where, absl::StrCat(k, " must be a non-empty array of schemas"));
    }
    std::vector<Sequence> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      ASSIGN_OR_RETURN(const uint32_t r,
                       Value(branches[i], absl::StrCat(where, "/", k, "/", i), depth + 1));
      alts.push_back({Item::Ref(r)});
    }
    return b.Rule(k, std::move(alts));
  }
  if (has("const")) {
    ASSIGN_OR_RETURN(const std::string text, Dump(s["const"], where));
    return Literal("const", {text});
  }
  if (has("enum")) {
    const Json& values = s["enum"];
    if (!values.is_array() || values.empty()) return Bad(where, "enum must be a non-empty array");
    std::vector<std::string> texts;
    for (const Json& v : values) {
      ASSIGN_OR_RETURN(std::string text, Dump(v, where));
      texts.push_back(std::move(text));
    }
    return Literal("enum", texts);
  }
  // The types, given or implied by the keywords.
  std::set<std::string> types;
  if (auto t = s.find("type"); t != s.end()) {
    std::vector<Json> names = t->is_array() ? std::vector<Json>(t->begin(), t->end())
                                            : std::vector<Json>{*t};
    if (names.empty()) return Bad(where, "type must not be an empty array");
    for (const Json& n : names) {
      static const std::set<std::string> kTypes = {"object", "array",   "string", "number",
                                                   "integer", "boolean", "null"};
      if (!n.is_string() || !kTypes.count(n.get<std::string>())) {
        return Bad(where, absl::StrCat("unknown type ", n.dump()));
      }
      types.insert(n.get<std::string>());
    }
  } else {
    if (has("properties") || has("required") || has("additionalProperties")) types.insert("object");
    if (has("items") || has("minItems") || has("maxItems")) types.insert("array");
    if (has("minLength") || has("maxLength")) types.insert("string");
    if (types.size() > 1) {
      return Bad(where, "keywords of several types without \"type\": say which type");
    }
  }
  if (auto n = s.find("nullable"); n != s.end()) {
    if (!n->is_boolean()) return Bad(where, "nullable must be a boolean");
    if (n->get<bool>() && !types.empty()) types.insert("null");
  }
  if (types.empty()) return Any();
  std::vector<Sequence> alts;
  for (const std::string& t : types) {
    uint32_t r = 0;
    if (t == "object") {
      ASSIGN_OR_RETURN(r, Object(s, where, depth));
    } else if (t == "array") {
      ASSIGN_OR_RETURN(r, Array(s, where, depth));
    } else if (t == "string") {
      ASSIGN_OR_RETURN(const int min, Count(s, "minLength", 0, where));
      ASSIGN_OR_RETURN(const int max, Count(s, "maxLength", -1, where));
      if (max >= 0 && min > max) return Bad(where, "minLength is above maxLength");
      r = String(min, max);
    } else if (t == "number") {
      r = Number();
    } else if (t == "integer") {
      if (types.count("number")) continue;  // number covers it
      r = Integer();
    } else if (t == "boolean") {
      r = Literal("boolean", {"true", "false"});
    } else {
      r = Literal("null", {"null"});
    }
    alts.push_back({Item::Ref(r)});
  }
  return b.Rule("type", std::move(alts));
}

JsonSchemaRules::JsonSchemaRules(GrammarBuilder* builder, const Json& root, bool strict)
    : c_(std::make_unique<JsonSchemaCompiler>(builder, root, strict)) {}

JsonSchemaRules::~JsonSchemaRules() = default;

absl::StatusOr<uint32_t> JsonSchemaRules::Value(const Json& schema, const std::string& where) {
  return c_->Value(schema, where, 0);
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileConstraint(
    const ConstraintSpec& spec) {
  GrammarBuilder builder;
  JsonSchemaCompiler c(&builder, spec.schema, spec.strict);
  uint32_t value = 0;
  if (spec.kind == ConstraintSpec::Kind::kJsonObject) {
    value = c.AnyObject();
  } else {
    ASSIGN_OR_RETURN(value, c.Value(spec.schema, "#", 0));
  }
  Sequence root = GrammarBuilder::Literal(spec.prefix);
  root.push_back(Item::Ref(value));
  GrammarBuilder::Append(root, GrammarBuilder::Literal(spec.suffix));
  const uint32_t r = c.b.Rule("root", {root});
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = c.b.Build(r);
  if (!g.ok()) return absl::InvalidArgumentError(absl::StrCat("schema: ", g.status().message()));
  return g;
}

}  // namespace moesplit
