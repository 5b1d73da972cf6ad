// jinja2 filters (3.1 semantics; `tojson` as HF transformers overrides it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/builtins.h"
#include "common/chat/internal/operators.h"
#include "common/chat/internal/strings.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat::internal {
namespace {

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", AbslView(message)));
}

// Binds positional/keyword arguments to parameter names; missing → Undefined.
absl::StatusOr<std::vector<Value>> Bind(std::string_view filter, const CallArgs& args,
                                        std::initializer_list<std::string_view> names) {
  std::vector<std::string_view> n(names);
  if (args.positional.size() > n.size()) {
    return TypeError(absl::StrCat("filter '", AbslView(filter), "' takes at most ", n.size(),
                                  " arguments (", args.positional.size(), " given)"));
  }
  std::vector<Value> out(n.size());
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    auto it = std::find(n.begin(), n.end(), k);
    if (it == n.end()) {
      return TypeError(absl::StrCat("filter '", AbslView(filter), "' got an unexpected keyword argument '",
                                    AbslView(k), "'"));
    }
    out[static_cast<size_t>(it - n.begin())] = v;
  }
  return out;
}

bool Given(const Value& v) { return !v.is_undefined(); }
bool BoolArg(const Value& v, bool dflt) { return Given(v) ? v.Truthy() : dflt; }

absl::StatusOr<Value> MakeList(EvalContext& ctx, std::vector<Value> items) {
  RETURN_IF_ERROR(ctx.CheckItems(items.size()));
  return Value::List(std::move(items));
}

// Key used by sort/unique/min/max: attribute, then lower-cased strings unless
// case_sensitive.
Value SortKey(EvalContext& ctx, const Value& item, const Value& attribute, bool case_sensitive) {
  Value v = item;
  if (Given(attribute) && !attribute.is_none()) {
    v = attribute.is_int() ? GetItem(&ctx, item, attribute) : GetAttribute(&ctx, item, attribute.Str());
  }
  if (!case_sensitive && v.is_string()) return Value(Lower(v.as_string()));
  return v;
}

// Stable sort of items by keys; the first comparison error is returned.
absl::Status SortByKeys(std::vector<std::pair<Value, Value>>* keyed, bool reverse) {
  absl::Status error;
  std::stable_sort(keyed->begin(), keyed->end(), [&](const auto& a, const auto& b) {
    if (!error.ok()) return false;
    absl::StatusOr<bool> lt = reverse ? ValueLess(b.first, a.first) : ValueLess(a.first, b.first);
    if (!lt.ok()) {
      error = lt.status();
      return false;
    }
    return *lt;
  });
  return error;
}

// ---------------------------------------------------------------- filters

absl::StatusOr<Value> FAbs(EvalContext&, const Value& v, CallArgs&) {
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  return TypeError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
}

absl::StatusOr<Value> FAttribute(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("attr", args, {"name"}));
  // Python getattr only: dict keys are not attributes (jinja2's do_attr).
  if (v.is_dict() && v.dict().kind() == DictKind::kDict) {
    std::optional<Value> m = BindMethod(&ctx, v, a[0].Str());
    return m ? *m : Value::Undefined(a[0].Str());
  }
  return GetAttribute(&ctx, v, a[0].Str());
}

absl::StatusOr<Value> FBatch(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("batch", args, {"linecount", "fill_with"}));
  if (!a[0].is_int() || a[0].as_int() <= 0) return absl::InvalidArgumentError("batch: linecount must be a positive integer");
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  const size_t n = static_cast<size_t>(a[0].as_int());
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += n) {
    std::vector<Value> chunk(items.begin() + static_cast<ptrdiff_t>(i),
                             items.begin() + static_cast<ptrdiff_t>(std::min(items.size(), i + n)));
    if (chunk.size() < n && Given(a[1])) {
      RETURN_IF_ERROR(ctx.CheckItems(n));
      chunk.resize(n, a[1]);
    }
    out.push_back(Value::List(std::move(chunk)));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FCapitalize(EvalContext&, const Value& v, CallArgs&) {
  return Value(PyCapitalize(v.Str()));
}

absl::StatusOr<Value> FCenter(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("center", args, {"width"}));
  const int64_t width = Given(a[0]) && a[0].is_int() ? a[0].as_int() : 80;
  RETURN_IF_ERROR(ctx.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0))));
  return Value(PyPad(v.Str(), width, " ", PadAlign::kCenter));
}

absl::StatusOr<Value> FLength(EvalContext&, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(int64_t n, Length(v));
  return Value(n);
}

absl::StatusOr<Value> FDefault(EvalContext&, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("default", args, {"default_value", "boolean"}));
  const Value dflt = Given(a[0]) ? a[0] : Value("");
  if (v.is_undefined() || (BoolArg(a[1], false) && !v.Truthy())) return dflt;
  return v;
}

absl::StatusOr<Value> FDictsort(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return TypeError("dictsort expects a mapping");
  const bool by_value = Given(a[1]) && a[1].Str() == "value";
  if (Given(a[1]) && !by_value && a[1].Str() != "key") {
    return absl::InvalidArgumentError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, val] : v.dict().entries()) {
    keyed.emplace_back(SortKey(ctx, by_value ? val : k, Value(), BoolArg(a[0], false)),
                       Value::Tuple({k, val}));
  }
  RETURN_IF_ERROR(SortByKeys(&keyed, BoolArg(a[2], false)));
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FEscape(EvalContext&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.Str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> FFirst(EvalContext&, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  if (items.empty()) return Value::Undefined("first item of an empty sequence");
  return items.front();
}

absl::StatusOr<Value> FLast(EvalContext&, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  if (items.empty()) return Value::Undefined("last item of an empty sequence");
  return items.back();
}

absl::StatusOr<Value> FFloat(EvalContext&, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("float", args, {"default"}));
  const Value dflt = Given(a[0]) ? a[0] : Value(0.0);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    if (std::optional<double> d = ParsePyFloat(v.as_string())) return Value(*d);
  }
  return dflt;
}

absl::StatusOr<Value> FFormat(EvalContext& ctx, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return absl::InvalidArgumentError("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  }
  Value fmt_args;
  if (!args.keyword.empty()) {
    fmt_args = Value::Dict();
    for (auto& [k, val] : args.keyword) fmt_args.dict().Put(k, val);
  } else {
    fmt_args = Value::Tuple(args.positional);
  }
  ASSIGN_OR_RETURN(std::string s, PercentFormat(v.Str(), fmt_args, ctx));
  return Value(std::move(s));
}

absl::StatusOr<Value> FIndent(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("indent", args, {"width", "first", "blank"}));
  std::string indent;
  if (a[0].is_string()) {
    indent = a[0].as_string();
  } else {
    const int64_t w = Given(a[0]) && (a[0].is_int() || a[0].is_bool()) ? a[0].as_int() : 4;
    RETURN_IF_ERROR(ctx.CheckSize(static_cast<size_t>(std::max<int64_t>(w, 0))));
    indent.assign(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
  }
  std::vector<std::string> lines = PySplitLines(v.Str() + "\n", false);
  std::string out;
  if (BoolArg(a[2], false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indent;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indent;
      out += lines[i];
      RETURN_IF_ERROR(ctx.CheckSize(out.size()));
    }
  }
  if (BoolArg(a[1], false)) out = indent + out;
  RETURN_IF_ERROR(ctx.CheckSize(out.size()));
  return Value(std::move(out));
}

absl::StatusOr<Value> FInt(EvalContext&, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("int", args, {"default", "base"}));
  const Value dflt = Given(a[0]) ? a[0] : Value(0);
  const int base = Given(a[1]) && a[1].is_int() ? static_cast<int>(a[1].as_int()) : 10;
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (std::optional<int64_t> i = ParsePyInt(v.as_string(), base)) return Value(*i);
    if (std::optional<double> d = ParsePyFloat(v.as_string())) {
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value(static_cast<int64_t>(*d));
    }
  }
  return dflt;
}

absl::StatusOr<Value> FItems(EvalContext&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::List();
  if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().entries()) out.push_back(Value::Tuple({k, val}));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FJoin(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("join", args, {"d", "attribute"}));
  const std::string sep = Given(a[0]) ? a[0].Str() : "";
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    const Value item = Given(a[1]) ? SortKey(ctx, items[i], a[1], true) : items[i];
    out += item.Str();
    RETURN_IF_ERROR(ctx.CheckSize(out.size()));
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> FList(EvalContext& ctx, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  return MakeList(ctx, std::move(items));
}

absl::StatusOr<Value> FLower(EvalContext&, const Value& v, CallArgs&) { return Value(Lower(v.Str())); }
absl::StatusOr<Value> FUpper(EvalContext&, const Value& v, CallArgs&) { return Value(Upper(v.Str())); }

absl::StatusOr<Value> FMap(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    const Value* attr = FindArg(args, 99, "attribute");
    if (attr == nullptr) return absl::InvalidArgumentError("map: expected a filter name or attribute=");
    const Value* dflt = FindArg(args, 99, "default");
    for (const Value& item : items) {
      Value r = SortKey(ctx, item, *attr, true);
      out.push_back(r.is_undefined() && dflt != nullptr ? *dflt : r);
    }
    return Value::List(std::move(out));
  }
  if (!args.positional[0].is_string()) return TypeError("map: filter name must be a string");
  const FilterImpl* f = FindFilter(args.positional[0].as_string());
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown filter '", AbslView(args.positional[0].as_string()), "'"));
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    RETURN_IF_ERROR(ctx.Step());
    CallArgs copy = rest;
    ASSIGN_OR_RETURN(Value r, f->fn(ctx, item, copy));
    out.push_back(std::move(r));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(EvalContext& ctx, const Value& v, CallArgs& args, bool want_max) {
  ASSIGN_OR_RETURN(auto a, Bind(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  if (items.empty()) return Value::Undefined("min/max of an empty sequence");
  size_t best = 0;
  Value best_key = SortKey(ctx, items[0], a[1], BoolArg(a[0], false));
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = SortKey(ctx, items[i], a[1], BoolArg(a[0], false));
    ASSIGN_OR_RETURN(bool better, want_max ? ValueLess(best_key, key) : ValueLess(key, best_key));
    if (better) { best = i; best_key = std::move(key); }
  }
  return items[best];
}
absl::StatusOr<Value> FMax(EvalContext& c, const Value& v, CallArgs& a) { return MinMax(c, v, a, true); }
absl::StatusOr<Value> FMin(EvalContext& c, const Value& v, CallArgs& a) { return MinMax(c, v, a, false); }

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectImpl(EvalContext& ctx, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  size_t next = 0;
  Value attr;
  if (by_attr) {
    if (args.positional.empty()) return TypeError("selectattr/rejectattr need an attribute name");
    attr = args.positional[next++];
  }
  const TestImpl* test = nullptr;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return TypeError("test name must be a string");
    test = FindTest(args.positional[next].as_string());
    if (test == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown test '", AbslView(args.positional[next].as_string()), "'"));
    }
    ++next;
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next), args.positional.end());
  rest.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(ctx.Step());
    const Value subject = by_attr ? SortKey(ctx, item, attr, true) : item;
    bool pass = subject.Truthy();
    if (test != nullptr) {
      CallArgs copy = rest;
      ASSIGN_OR_RETURN(pass, test->fn(ctx, subject, copy));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}
absl::StatusOr<Value> FSelect(EvalContext& c, const Value& v, CallArgs& a) { return SelectImpl(c, v, a, false, true); }
absl::StatusOr<Value> FReject(EvalContext& c, const Value& v, CallArgs& a) { return SelectImpl(c, v, a, false, false); }
absl::StatusOr<Value> FSelectAttr(EvalContext& c, const Value& v, CallArgs& a) { return SelectImpl(c, v, a, true, true); }
absl::StatusOr<Value> FRejectAttr(EvalContext& c, const Value& v, CallArgs& a) { return SelectImpl(c, v, a, true, false); }

absl::StatusOr<Value> FReplace(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("replace", args, {"old", "new", "count"}));
  const int64_t count = Given(a[2]) && !a[2].is_none() && a[2].is_int() ? a[2].as_int() : -1;
  ASSIGN_OR_RETURN(std::string s, PyReplace(ctx, v.Str(), a[0].Str(), a[1].Str(), count));
  return Value(std::move(s));
}

absl::StatusOr<Value> FReverse(EvalContext&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::vector<uint32_t> cps = DecodeUtf8(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(EncodeUtf8(cps, 0, cps.size()));
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FRound(EvalContext&, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("round", args, {"precision", "method"}));
  if (!v.is_number()) return TypeError(absl::StrCat("type ", v.TypeName(), " doesn't define __round__ method"));
  const int64_t precision = Given(a[0]) && a[0].is_int() ? a[0].as_int() : 0;
  const std::string method = Given(a[1]) ? a[1].Str() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return absl::InvalidArgumentError("FilterArgumentError: method must be common, ceil or floor");
  }
  return Value(PyRound(v.as_float(), precision, method));
}

absl::StatusOr<Value> FString(EvalContext&, const Value& v, CallArgs&) { return Value(v.Str()); }

absl::StatusOr<Value> FSort(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(SortKey(ctx, item, a[2], BoolArg(a[1], false)), item);
  RETURN_IF_ERROR(SortByKeys(&keyed, BoolArg(a[0], false)));
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FSum(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("sum", args, {"attribute", "start"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  Value total = Given(a[1]) ? a[1] : Value(0);
  for (const Value& item : items) {
    const Value x = Given(a[0]) ? SortKey(ctx, item, a[0], true) : item;
    ASSIGN_OR_RETURN(total, BinaryOp(BinOp::kAdd, total, x, ctx));
  }
  return total;
}

absl::StatusOr<Value> FTitle(EvalContext&, const Value& v, CallArgs&) { return Value(JinjaTitle(v.Str())); }

absl::StatusOr<Value> FToJson(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  Value::JsonOptions opt;
  // jinja2's own tojson takes indent positionally; accept an int first arg too.
  Value indent = a[1];
  if (a[0].is_int() && !a[0].is_bool() && !Given(a[1])) { indent = a[0]; a[0] = Value(); }
  opt.ensure_ascii = BoolArg(a[0], false);
  if (indent.is_int() || indent.is_bool()) {
    const int64_t n = std::clamp<int64_t>(indent.as_int(), 0, 256);
    opt.indent = std::string(static_cast<size_t>(n), ' ');
  } else if (indent.is_string()) {
    opt.indent = indent.as_string();
  }
  if (a[2].is_list() && a[2].list().items.size() == 2) {
    opt.item_separator = a[2].list().items[0].Str();
    opt.key_separator = a[2].list().items[1].Str();
  }
  opt.sort_keys = BoolArg(a[3], false);
  ASSIGN_OR_RETURN(std::string s, v.ToJson(opt));
  RETURN_IF_ERROR(ctx.CheckSize(s.size()));
  return Value(std::move(s));
}

absl::StatusOr<Value> FTrim(EvalContext&, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("trim", args, {"chars"}));
  return Value(PyStrip(v.Str(), Given(a[0]) && !a[0].is_none() ? std::optional<std::string>(a[0].Str()) : std::nullopt,
                       true, true));
}

absl::StatusOr<Value> FUnique(EvalContext& ctx, const Value& v, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, Bind("unique", args, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& item : items) {
    RETURN_IF_ERROR(ctx.Step(seen.size() + 1));
    Value key = SortKey(ctx, item, a[1], BoolArg(a[0], false));
    bool dup = false;
    for (const Value& s : seen) {
      if (ValuesEqual(s, key)) { dup = true; break; }
    }
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FWordcount(EvalContext&, const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : DecodeUtf8(v.Str())) {
    const bool w = IsWordChar(cp);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

absl::StatusOr<Value> FSafe(EvalContext&, const Value& v, CallArgs&) { return Value(v.Str()); }

const FilterImpl kFilters[] = {
    {"abs", FAbs}, {"attr", FAttribute}, {"batch", FBatch}, {"capitalize", FCapitalize},
    {"center", FCenter}, {"count", FLength}, {"d", FDefault}, {"default", FDefault},
    {"dictsort", FDictsort}, {"e", FEscape}, {"escape", FEscape}, {"first", FFirst},
    {"float", FFloat}, {"format", FFormat}, {"indent", FIndent}, {"int", FInt},
    {"items", FItems}, {"join", FJoin}, {"last", FLast}, {"length", FLength}, {"list", FList},
    {"lower", FLower}, {"map", FMap}, {"max", FMax}, {"min", FMin}, {"reject", FReject},
    {"rejectattr", FRejectAttr}, {"replace", FReplace}, {"reverse", FReverse}, {"round", FRound},
    {"safe", FSafe}, {"select", FSelect}, {"selectattr", FSelectAttr}, {"sort", FSort},
    {"string", FString}, {"sum", FSum}, {"title", FTitle}, {"tojson", FToJson}, {"trim", FTrim},
    {"unique", FUnique}, {"upper", FUpper}, {"wordcount", FWordcount},
};

}  // namespace

const FilterImpl* FindFilter(std::string_view name) {
  for (const FilterImpl& f : kFilters) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace moesplit::chat::internal
