#include "common/sampling/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/sampling/internal/regex.h"

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
      "enum",     "const",    "anyOf",      "oneOf",     "$ref",
      "allOf",    "minimum",  "maximum",    "exclusiveMinimum", "exclusiveMaximum",
      "multipleOf", "pattern", "format",    "uniqueItems"};
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
  // The schema a local $ref ("#/..." JSON pointer into the root) names.
  absl::StatusOr<const Json*> Target(const std::string& ref, const std::string& where) const;
  absl::StatusOr<uint32_t> Object(const Json& s, const std::string& where, int depth);
  absl::StatusOr<uint32_t> Array(const Json& s, const std::string& where, int depth);
  absl::StatusOr<uint32_t> MapObject(uint32_t value);
  // allOf, and $ref beside other keywords, folded into one schema.
  absl::StatusOr<Json> Flatten(const Json& s, const std::string& where, int depth);
  absl::StatusOr<uint32_t> StringValue(const Json& s, const std::string& where);
  absl::StatusOr<uint32_t> Bounded(const Json& s, bool integer, const std::string& where);
  // Digits (no leading zero) of the integers in [lo, hi] that are multiples
  // of k; nullopt when there is none. REQUIRES 0 <= lo, hi <= kMaxInteger.
  std::optional<uint32_t> Unsigned(int64_t lo, int64_t hi, int64_t k);
  // Equal-length digit strings s with a <= s <= z and (rem * 10^len + s) % k == 0.
  std::optional<uint32_t> Span(const std::string& a, const std::string& z, int64_t rem, int64_t k);
  Item Digit() { return Item::Bytes(ByteSet::Range('0', '9')); }
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
  std::map<std::tuple<std::string, std::string, int64_t, int64_t>, std::optional<uint32_t>> spans_;
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
    const ByteSet d = ByteSet().Add('D').Add('d');
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
         // \uXXXX: no lone surrogate (invalid JSON), a pair as two escapes.
         {Byte('\\'), Byte('u'), B(ByteSet::Range('0', '9').Add('A', 'C').Add('a', 'c')), B(hex), B(hex), B(hex)},
         {Byte('\\'), Byte('u'), B(ByteSet().Add('E', 'F').Add('e', 'f')), B(hex), B(hex), B(hex)},
         {Byte('\\'), Byte('u'), B(d), B(ByteSet::Range('0', '7')), B(hex), B(hex)},
         {Byte('\\'), Byte('u'), B(d), B(ByteSet::Range('8', '9').Add('A', 'B').Add('a', 'b')), B(hex), B(hex),
          Byte('\\'), Byte('u'), B(d), B(ByteSet::Range('C', 'F').Add('c', 'f')), B(hex), B(hex)}});
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

absl::StatusOr<const Json*> JsonSchemaCompiler::Target(const std::string& ref, const std::string& where) const {
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
  return target;
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::Ref(const std::string& ref, const std::string& where,
                                       int depth) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  ASSIGN_OR_RETURN(const Json* target, Target(ref, where));
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
  if (auto u = s.find("uniqueItems"); u != s.end()) {
    if (!u->is_boolean()) return Bad(where, "uniqueItems must be a boolean");
    if (u->get<bool>() && (max < 0 || max > 1)) {
      return Bad(where, "uniqueItems true is not supported (a grammar cannot keep the items "
                        "apart) unless maxItems is at most 1");
    }
  }
  return List("array", '[', ']', {Item::Ref(item)}, min, max);
}

// --- numbers with bounds and multipleOf

// The largest magnitude the number rules write (16 integer digits).
constexpr int64_t kMaxInteger = 9999999999999999;

std::optional<uint32_t> JsonSchemaCompiler::Span(const std::string& a, const std::string& z,
                                                 int64_t rem, int64_t k) {
  const auto key = std::make_tuple(a, z, rem, k);
  if (auto it = spans_.find(key); it != spans_.end()) return it->second;
  std::optional<uint32_t> out;
  if (a.empty()) {
    if (rem == 0) out = b.Rule("digits-end", {{}});
  } else {
    const size_t rest = a.size() - 1;
    std::map<std::tuple<std::string, std::string, int64_t>, ByteSet> groups;
    for (char d = a[0]; d <= z[0]; ++d) {
      const std::string na = d == a[0] ? a.substr(1) : std::string(rest, '0');
      const std::string nz = d == z[0] ? z.substr(1) : std::string(rest, '9');
      groups[{na, nz, (rem * 10 + (d - '0')) % k}].Add(static_cast<uint8_t>(d));
    }
    std::vector<Sequence> alts;
    for (const auto& [next, set] : groups) {
      const auto& [na, nz, nr] = next;
      if (rest == 0) {
        if (nr == 0) alts.push_back({Item::Bytes(set)});
        continue;
      }
      if (const std::optional<uint32_t> child = Span(na, nz, nr, k)) {
        alts.push_back({Item::Bytes(set), Item::Ref(*child)});
      }
    }
    if (!alts.empty()) out = b.Rule("digits", std::move(alts));
  }
  spans_[key] = out;
  return out;
}

std::optional<uint32_t> JsonSchemaCompiler::Unsigned(int64_t lo, int64_t hi, int64_t k) {
  std::vector<Sequence> alts;
  int64_t low = 0, high = 9;  // the L-digit numbers
  int full_from = 0, full_to = 0;  // a run of lengths whose numbers are all in range (k == 1)
  auto flush_full = [&] {
    if (full_from == 0) return;
    const Item first = Item::Bytes(ByteSet::Range(full_from == 1 ? '0' : '1', '9'));
    if (full_from == 1 && full_to > 1) {
      alts.push_back({first});
      alts.push_back({Item::Bytes(ByteSet::Range('1', '9')),
                      Item::Ref(b.Repeat("digits-any", {Digit()}, 1, full_to - 1))});
    } else if (full_to == 1) {
      alts.push_back({first});
    } else {
      alts.push_back({first, Item::Ref(b.Repeat("digits-any", {Digit()}, full_from - 1,
                                                 full_to - 1))});
    }
    full_from = 0;
  };
  for (int len = 1; len <= 16; ++len, low = high + 1, high = high * 10 + 9) {
    const int64_t a = std::max(lo, low), z = std::min(hi, high);
    if (a > z) continue;
    if (k == 1 && a == low && z == high) {
      if (full_from == 0) full_from = len;
      full_to = len;
      continue;
    }
    flush_full();
    if (auto r = Span(std::to_string(a), std::to_string(z), 0, k)) alts.push_back({Item::Ref(*r)});
  }
  flush_full();
  if (alts.empty()) return std::nullopt;
  return b.Rule("digits-in-range", std::move(alts));
}

absl::StatusOr<uint32_t> JsonSchemaCompiler::Bounded(const Json& s, bool integer,
                                                     const std::string& where) {
  // The bounds: (value, exclusive); draft 4's boolean exclusive* too.
  struct Bound {
    std::optional<double> v;
    bool excl = false;
  };
  Bound lo, hi;
  auto number = [&](const char* key) -> absl::StatusOr<std::optional<double>> {
    auto it = s.find(key);
    if (it == s.end() || it->is_boolean()) return std::nullopt;
    if (!it->is_number()) return Bad(where, absl::StrCat(key, " must be a number"));
    return it->get<double>();
  };
  ASSIGN_OR_RETURN(std::optional<double> minimum, number("minimum"));
  ASSIGN_OR_RETURN(std::optional<double> maximum, number("maximum"));
  ASSIGN_OR_RETURN(std::optional<double> ex_min, number("exclusiveMinimum"));
  ASSIGN_OR_RETURN(std::optional<double> ex_max, number("exclusiveMaximum"));
  auto flag = [&](const char* key) {
    auto it = s.find(key);
    return it != s.end() && it->is_boolean() && it->get<bool>();
  };
  lo = {minimum, flag("exclusiveMinimum")};
  hi = {maximum, flag("exclusiveMaximum")};
  if (ex_min && (!lo.v || *ex_min >= *lo.v)) lo = {ex_min, true};
  if (ex_max && (!hi.v || *ex_max <= *hi.v)) hi = {ex_max, true};
  int64_t k = 1;
  int fraction_digits = 16;
  if (auto it = s.find("multipleOf"); it != s.end()) {
    if (!it->is_number() || it->get<double>() <= 0) {
      return Bad(where, "multipleOf must be a number above 0");
    }
    const double m = it->get<double>();
    int n = 0;
    while (n < 16 && std::fabs(m * std::pow(10.0, n) - 1) > 1e-9) ++n;
    if (m == std::floor(m) && m <= 1000) {
      k = static_cast<int64_t>(m);
      fraction_digits = 0;
    } else if (n > 0 && n < 16 && !integer) {
      fraction_digits = n;  // multipleOf 0.01: at most 2 fraction digits
    } else {
      return Bad(where, absl::StrCat("multipleOf ", it->dump(),
                                     " is not supported (an integer up to 1000, or 10^-n "
                                     "on a number)"));
    }
  }
  if (fraction_digits == 0) integer = true;
  // The bounds as integers: integer schemas round inward; a number's bound
  // must be an integer.
  std::optional<int64_t> lo_i, hi_i;
  bool lo_excl = lo.excl, hi_excl = hi.excl;
  auto whole = [&](double v, const char* which) -> absl::Status {
    if (v != std::floor(v)) {
      return Bad(where, absl::StrCat("a ", which, " that is not an integer is supported on "
                                     "integers only (", v, ")"));
    }
    return absl::OkStatus();
  };
  constexpr double kLimit = static_cast<double>(kMaxInteger);
  if (lo.v) {
    double v = *lo.v;
    if (integer) {
      v = lo.excl ? std::floor(v) + 1 : std::ceil(v);
      lo_excl = false;
    } else {
      RETURN_IF_ERROR(whole(v, "minimum"));
    }
    if (v > kLimit) return Bad(where, "the minimum is above the largest number written (16 digits)");
    if (v >= -kLimit) lo_i = static_cast<int64_t>(v);
  }
  if (hi.v) {
    double v = *hi.v;
    if (integer) {
      v = hi.excl ? std::ceil(v) - 1 : std::floor(v);
      hi_excl = false;
    } else {
      RETURN_IF_ERROR(whole(v, "maximum"));
    }
    if (v < -kLimit) return Bad(where, "the maximum is below the smallest number written (16 digits)");
    if (v <= kLimit) hi_i = static_cast<int64_t>(v);
  }
  // Fractions: any (none, or 1..F digits), and above zero (ending in 1-9).
  std::optional<uint32_t> frac_any, frac_nonzero;
  if (!integer) {
    frac_any = b.Rule("fraction", {{}, {Byte('.'), Item::Ref(b.Repeat("fraction-digits", {Digit()},
                                                                       1, fraction_digits))}});
    Sequence nz = {Byte('.')};
    if (fraction_digits > 1) nz.push_back(Item::Ref(b.Repeat("fraction-digits", {Digit()}, 0, fraction_digits - 1)));
    nz.push_back(Item::Bytes(ByteSet::Range('1', '9')));
    frac_nonzero = b.Rule("fraction-above-zero", {nz});
  }
  // Magnitudes y with (y > or >= low) and (y < or <= high), high absent =
  // unbounded, as "I.F" with I the integer part.
  std::vector<Sequence> alts;
  auto magnitudes = [&](const std::string& sign, int64_t low, bool low_excl,
                        std::optional<int64_t> high, bool high_excl) {
    Sequence prefix = GrammarBuilder::Literal(sign);
    auto add = [&](Sequence tail) {
      Sequence seq = prefix;
      GrammarBuilder::Append(seq, tail);
      alts.push_back(std::move(seq));
    };
    if (integer) {
      const int64_t a = low + (low_excl ? 1 : 0);
      const int64_t z = high ? *high - (high_excl ? 1 : 0) : kMaxInteger;
      if (a <= z) {
        if (auto r = Unsigned(a, std::min(z, kMaxInteger), k)) add({Item::Ref(*r)});
      }
      return;
    }
    // I in [a, z] with any fraction; I == low with a fraction above zero
    // when low is exclusive; I == high with none when high is inclusive.
    const int64_t a = low + (low_excl ? 1 : 0);
    const int64_t z = high ? *high - 1 : kMaxInteger;
    if (a <= z) {
      if (auto r = Unsigned(a, z, 1)) add({Item::Ref(*r), Item::Ref(*frac_any)});
    }
    if (low_excl && (!high || low < *high)) {
      add({Item::Ref(*Unsigned(low, low, 1)), Item::Ref(*frac_nonzero)});
    }
    if (high && !high_excl && (*high > low || (*high == low && !low_excl))) {
      add({Item::Ref(*Unsigned(*high, *high, 1))});
    }
  };
  // x >= 0: y = x.
  if (!hi_i || *hi_i >= 0) {
    int64_t low = 0;
    bool low_excl = false;
    if (lo_i && *lo_i >= 0) low = *lo_i, low_excl = lo_excl;
    magnitudes("", low, low_excl, hi_i, hi_excl);
  }
  // x < 0: y = -x > 0; x <= M is y >= -M and x >= m is y <= -m.
  if (!lo_i || *lo_i < 0) {
    int64_t low = 0;
    bool low_excl = true;
    if (hi_i && *hi_i < 0) low = -*hi_i, low_excl = hi_excl;
    std::optional<int64_t> high;
    if (lo_i) high = -*lo_i;
    magnitudes("-", low, low_excl, high, lo_excl);
  }
  if (alts.empty()) {
    return Bad(where, absl::StrCat("no ", integer ? "integer" : "number",
                                   " satisfies the bounds and multipleOf"));
  }
  return b.Rule(integer ? "integer-in-range" : "number-in-range", std::move(alts));
}

// --- strings: pattern and format

namespace {

// The formats, as regular expressions (internal/regex.h) of their text.
// date: RFC 3339 full-date (February has up to 29 days in every year);
// time: full-time (an offset is required); date-time: both with "T".
const std::map<std::string, std::string>& Formats() {
  static const auto* f = [] {
    const std::string date =
        R"(\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|[12]\d)))";
    const std::string time =
        R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
    const std::string label = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
    const std::string unreserved = R"((?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2}))";
    const std::string pchar = R"((?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2}))";
    const std::string octet = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
    return new std::map<std::string, std::string>{
        {"date", "^" + date + "$"},
        {"time", "^" + time + "$"},
        {"date-time", "^" + date + "T" + time + "$"},
        {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
        {"email", R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)" +
                      label + R"((?:\.)" + label + ")+$"},
        {"hostname", "^" + label + R"((?:\.)" + label + ")*$"},
        {"ipv4", "^(?:" + octet + R"(\.){3})" + octet + "$"},
        {"uri", R"(^[A-Za-z][A-Za-z0-9+.\-]*:(?://(?:(?:)" + unreserved + "|:)*@)?" + unreserved +
                    R"(*(?::\d*)?(?:/)" + pchar + "*)*|(?:/?" + pchar + "+(?:/" + pchar +
                    R"(*)*)?)(?:\?(?:)" + pchar + R"(|[/?])*)?(?:#(?:)" + pchar + "|[/?])*)?$"},
    };
  }();
  return *f;
}

}  // namespace

absl::StatusOr<uint32_t> JsonSchemaCompiler::StringValue(const Json& s, const std::string& where) {
  ASSIGN_OR_RETURN(const int min, Count(s, "minLength", 0, where));
  ASSIGN_OR_RETURN(const int max, Count(s, "maxLength", -1, where));
  if (max >= 0 && min > max) return Bad(where, "minLength is above maxLength");
  auto pattern = s.find("pattern");
  auto format = s.find("format");
  if (pattern == s.end() && format == s.end()) return String(min, max);
  if (s.contains("minLength") || s.contains("maxLength")) {
    return Bad(where, absl::StrCat("minLength/maxLength together with ",
                                   pattern != s.end() ? "pattern" : "format",
                                   " is not supported: put the length into the pattern"));
  }
  std::string regex;
  if (pattern != s.end()) {
    // format is an annotation in JSON Schema 2020-12; the pattern decides.
    if (!pattern->is_string()) return Bad(where, "pattern must be a string");
    regex = pattern->get<std::string>();
  } else {
    if (!format->is_string()) return Bad(where, "format must be a string");
    auto it = Formats().find(format->get<std::string>());
    if (it == Formats().end()) {
      std::vector<std::string> names;
      for (const auto& [name, r] : Formats()) names.push_back(name);
      return Bad(where, absl::StrCat("format '", format->get<std::string>(),
                                     "' is not supported (supported: ", absl::StrJoin(names, ", "),
                                     ")"));
    }
    regex = it->second;
  }
  absl::StatusOr<uint32_t> content = grammar::RegexStringContent(b, regex, kMaxRepeat);
  if (!content.ok()) return Bad(where, std::string(content.status().message()));
  return b.Rule("string-pattern", {{Byte('"'), Item::Ref(*content), Byte('"')}});
}

// --- allOf

absl::StatusOr<Json> JsonSchemaCompiler::Flatten(const Json& s, const std::string& where,
                                                 int depth) {
  if (depth > kMaxDepth) return Bad(where, absl::StrCat("nested deeper than ", kMaxDepth));
  // The parts: s without allOf/$ref, each allOf branch, the $ref's target.
  std::vector<std::pair<Json, std::string>> parts;
  Json own = Json::object();
  for (const auto& [k, v] : s.items()) {
    if (k != "allOf" && k != "$ref" && !Annotations().count(k)) own[k] = v;
  }
  parts.emplace_back(own, where);
  if (auto it = s.find("allOf"); it != s.end()) {
    if (!it->is_array() || it->empty()) return Bad(where, "allOf must be a non-empty array of schemas");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string w = absl::StrCat(where, "/allOf/", i);
      const Json& branch = (*it)[i];
      if (branch.is_boolean()) {
        if (!branch.get<bool>()) return Bad(w, "the schema false accepts nothing");
        continue;
      }
      if (!branch.is_object()) return Bad(w, "a schema must be an object or a boolean");
      ASSIGN_OR_RETURN(Json flat, Flatten(branch, w, depth + 1));
      parts.emplace_back(std::move(flat), w);
    }
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return Bad(where, "$ref must be a string");
    const std::string ref = it->get<std::string>();
    ASSIGN_OR_RETURN(const Json* target, Target(ref, where));
    if (target->is_object()) {
      ASSIGN_OR_RETURN(Json flat, Flatten(*target, ref, depth + 1));
      parts.emplace_back(std::move(flat), ref);
    } else if (*target != Json(true)) {
      return Bad(ref, "a schema combined with allOf or other keywords must be an object");
    }
  }
  // Merge: properties and required are joined; bounds take the tighter;
  // type is the intersection; any other keyword must agree.
  Json out = Json::object();
  std::vector<const Json*> closed;  // the properties of parts with additionalProperties false
  for (const auto& [part, w] : parts) {
    for (const auto& [k, v] : part.items()) {
      if (k == "additionalProperties" && v == Json(false)) {
        static const Json kNoProperties = Json::object();
        closed.push_back(part.contains("properties") ? &part["properties"] : &kNoProperties);
        continue;
      }
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      Json& have = out[k];
      if (k == "properties") {
        if (!v.is_object() || !have.is_object()) return Bad(w, "properties must be an object");
        for (const auto& [name, sub] : v.items()) {
          if (have.contains(name) && have[name] != sub) {
            return Bad(w, absl::StrCat("property '", name,
                                       "' has different schemas in the allOf branches"));
          }
          have[name] = sub;
        }
      } else if (k == "required") {
        if (!v.is_array() || !have.is_array()) return Bad(w, "required must be an array of property names");
        for (const Json& n : v) {
          if (std::find(have.begin(), have.end(), n) == have.end()) have.push_back(n);
        }
      } else if (k == "type") {
        auto names = [](const Json& t) {
          std::set<std::string> out;
          for (const Json& n : t.is_array() ? t : Json::array({t})) {
            if (n.is_string()) out.insert(n.get<std::string>());
          }
          if (out.count("number")) out.insert("integer");
          return out;
        };
        const std::set<std::string> a = names(have), c = names(v);
        Json both = Json::array();
        for (const std::string& n : a) {
          if (c.count(n)) both.push_back(n);
        }
        if (both.empty()) return Bad(w, "the allOf branches have no type in common");
        have = both.size() == 1 ? both[0] : both;
      } else if ((k == "minimum" || k == "exclusiveMinimum" || k == "minLength" ||
                  k == "minItems") && v.is_number() && have.is_number()) {
        if (v > have) have = v;
      } else if ((k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" ||
                  k == "maxItems") && v.is_number() && have.is_number()) {
        if (v < have) have = v;
      } else if (have != v) {
        return Bad(w, absl::StrCat("'", k, "' differs between the allOf branches"));
      }
    }
  }
  // A part with additionalProperties false allows only its own properties.
  if (!closed.empty()) {
    out["additionalProperties"] = false;
    if (out.contains("properties")) {
      Json kept = Json::object();
      for (const auto& [name, sub] : out["properties"].items()) {
        bool allowed = true;
        for (const Json* c : closed) allowed = allowed && c->contains(name);
        if (allowed) {
          kept[name] = sub;
        } else if (out.contains("required") &&
                   std::find(out["required"].begin(), out["required"].end(), Json(name)) !=
                       out["required"].end()) {
          return Bad(where, absl::StrCat("property '", name,
                                         "' is required by one allOf branch and not allowed by "
                                         "another (additionalProperties false)"));
        }
      }
      out["properties"] = std::move(kept);
    }
  }
  return out;
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
  if (has("allOf") || (has("$ref") && keys.size() > 1)) {
    ASSIGN_OR_RETURN(const Json flat, Flatten(s, where, depth));
    return Value(flat, where, depth + 1);
  }
  if (has("$ref")) {
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
    if (has("minLength") || has("maxLength") || has("pattern") || has("format")) {
      types.insert("string");
    }
    if (has("uniqueItems")) types.insert("array");
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
      if (has(k)) types.insert("number");
    }
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
      ASSIGN_OR_RETURN(r, StringValue(s, where));
    } else if (t == "number" || t == "integer") {
      if (t == "integer" && types.count("number")) continue;  // number covers it
      const bool bounded = has("minimum") || has("maximum") || has("exclusiveMinimum") ||
                           has("exclusiveMaximum") || has("multipleOf");
      if (bounded) {
        ASSIGN_OR_RETURN(r, Bounded(s, t == "integer", where));
      } else {
        r = t == "integer" ? Integer() : Number();
      }
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
