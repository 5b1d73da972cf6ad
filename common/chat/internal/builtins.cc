// Access helpers (attribute/item/slice/iteration), tests and globals.
// Filters live in filters.cc, str/dict/list methods in methods.cc.
#include "common/chat/internal/builtins.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/operators.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat::internal {
namespace {

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", AbslView(message)));
}

// Normalised Python index (negative from the end); nullopt when out of range.
std::optional<size_t> NormIndex(int64_t i, size_t size) {
  const int64_t n = static_cast<int64_t>(size);
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return static_cast<size_t>(i);
}

// ---------------------------------------------------------------- tests

const Value& Arg0(const CallArgs& args) {
  static const Value kUndefined;
  const Value* v = FindArg(args, 0, "value");
  return v != nullptr ? *v : kUndefined;
}

absl::StatusOr<bool> CompareTest(CmpOp op, const Value& in, const CallArgs& args) {
  return Compare(op, in, Arg0(args));
}

bool IsIterable(const Value& v) {
  return v.is_string() || v.is_list() || (v.is_dict() && v.dict().kind() == DictKind::kDict) ||
         v.is_undefined();
}

using TestFn = absl::StatusOr<bool> (*)(EvalContext&, const Value&, CallArgs&);
#define TEST_LAMBDA(expr) [](EvalContext&, const Value& v, CallArgs& a) -> absl::StatusOr<bool> { (void)a; return (expr); }

absl::StatusOr<bool> IntTest(const Value& v, int64_t mod_of) {
  if (!v.is_int() && !v.is_bool()) return TypeError(absl::StrCat("expected an integer, got ", v.TypeName()));
  return v.as_int() % 2 == mod_of || v.as_int() % 2 == -mod_of;
}

absl::StatusOr<bool> DivisibleBy(const Value& v, const CallArgs& a) {
  const Value& n = Arg0(a);
  if (!(v.is_int() || v.is_bool()) || !(n.is_int() || n.is_bool())) {
    return TypeError("divisibleby expects integers");
  }
  if (n.as_int() == 0) return absl::InvalidArgumentError("ZeroDivisionError: integer division or modulo by zero");
  if (n.as_int() == -1) return true;
  return v.as_int() % n.as_int() == 0;
}

bool CaseTest(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (uint32_t cp : DecodeUtf8(v.as_string())) {
    if (upper ? IsLower(cp) : IsUpper(cp)) return false;
    if (IsLower(cp) || IsUpper(cp)) cased = true;
  }
  return cased;
}

bool SameAs(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.identity() != nullptr) return a.identity() == b.identity();
  return ValuesEqual(a, b);
}

const TestImpl kTests[] = {
    {"defined", TEST_LAMBDA(!v.is_undefined())},
    {"undefined", TEST_LAMBDA(v.is_undefined())},
    {"none", TEST_LAMBDA(v.is_none())},
    {"string", TEST_LAMBDA(v.is_string())},
    {"number", TEST_LAMBDA(v.is_number())},
    {"integer", TEST_LAMBDA(v.is_int())},
    {"float", TEST_LAMBDA(v.is_float())},
    {"boolean", TEST_LAMBDA(v.is_bool())},
    {"true", TEST_LAMBDA(v.is_bool() && v.as_bool())},
    {"false", TEST_LAMBDA(v.is_bool() && !v.as_bool())},
    {"mapping", TEST_LAMBDA(v.is_dict() && v.dict().kind() == DictKind::kDict)},
    {"iterable", TEST_LAMBDA(IsIterable(v))},
    {"sequence", TEST_LAMBDA(IsIterable(v))},
    {"callable", TEST_LAMBDA(v.is_callable())},
    {"escaped", TEST_LAMBDA(false)},
    {"lower", TEST_LAMBDA(CaseTest(v, false))},
    {"upper", TEST_LAMBDA(CaseTest(v, true))},
    {"even", TEST_LAMBDA(IntTest(v, 0))},
    {"odd", TEST_LAMBDA(IntTest(v, 1))},
    {"divisibleby", TEST_LAMBDA(DivisibleBy(v, a))},
    {"eq", TEST_LAMBDA(CompareTest(CmpOp::kEq, v, a))},
    {"equalto", TEST_LAMBDA(CompareTest(CmpOp::kEq, v, a))},
    {"==", TEST_LAMBDA(CompareTest(CmpOp::kEq, v, a))},
    {"ne", TEST_LAMBDA(CompareTest(CmpOp::kNe, v, a))},
    {"!=", TEST_LAMBDA(CompareTest(CmpOp::kNe, v, a))},
    {"lt", TEST_LAMBDA(CompareTest(CmpOp::kLt, v, a))},
    {"lessthan", TEST_LAMBDA(CompareTest(CmpOp::kLt, v, a))},
    {"<", TEST_LAMBDA(CompareTest(CmpOp::kLt, v, a))},
    {"le", TEST_LAMBDA(CompareTest(CmpOp::kLe, v, a))},
    {"<=", TEST_LAMBDA(CompareTest(CmpOp::kLe, v, a))},
    {"gt", TEST_LAMBDA(CompareTest(CmpOp::kGt, v, a))},
    {"greaterthan", TEST_LAMBDA(CompareTest(CmpOp::kGt, v, a))},
    {">", TEST_LAMBDA(CompareTest(CmpOp::kGt, v, a))},
    {"ge", TEST_LAMBDA(CompareTest(CmpOp::kGe, v, a))},
    {">=", TEST_LAMBDA(CompareTest(CmpOp::kGe, v, a))},
    {"in", TEST_LAMBDA(Contains(Arg0(a), v))},
    {"sameas", TEST_LAMBDA(SameAs(v, Arg0(a)))},
    {"filter", TEST_LAMBDA(v.is_string() && FindFilter(v.as_string()) != nullptr)},
    {"test", TEST_LAMBDA(v.is_string() && FindTest(v.as_string()) != nullptr)},
};
#undef TEST_LAMBDA

// ---------------------------------------------------------------- globals

absl::StatusOr<int64_t> IntArg(const Value& v, std::string_view fn) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  return TypeError(absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer (",
                                AbslView(fn), ")"));
}

absl::StatusOr<Value> Range(EvalContext* ctx, CallArgs& args) {
  if (!args.keyword.empty()) return TypeError("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) return TypeError(absl::StrCat("range expected 1 to 3 arguments, got ", p.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (p.size() == 1) {
    ASSIGN_OR_RETURN(stop, IntArg(p[0], "range"));
  } else {
    ASSIGN_OR_RETURN(start, IntArg(p[0], "range"));
    ASSIGN_OR_RETURN(stop, IntArg(p[1], "range"));
    if (p.size() == 3) {
      ASSIGN_OR_RETURN(step, IntArg(p[2], "range"));
    }
  }
  if (step == 0) return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
  // Count without overflow: the number of steps from start towards stop.
  long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
  RETURN_IF_ERROR(ctx->CheckItems(count > 1e12 ? static_cast<size_t>(1e12) : static_cast<size_t>(count)));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    // Every produced value lies between start and stop, so it fits int64.
    out.emplace_back(static_cast<int64_t>(static_cast<__int128>(start) + static_cast<__int128>(i) * step));
  }
  return Value::List(std::move(out));
}

// dict(mapping_or_pairs?, **kwargs) and namespace(...).
absl::StatusOr<Value> MakeDict(CallArgs& args, DictKind kind) {
  Value d = Value::Dict(kind);
  if (args.positional.size() > 1) return TypeError("expected at most 1 positional argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().entries()) RETURN_IF_ERROR(d.dict().Set(k, v));
    } else if (src.is_list()) {
      for (const Value& pair : src.list().items) {
        if (!pair.is_list() || pair.list().items.size() != 2) {
          return TypeError("dictionary update sequence element has wrong length; 2 is required");
        }
        RETURN_IF_ERROR(d.dict().Set(pair.list().items[0], pair.list().items[1]));
      }
    } else {
      return TypeError(absl::StrCat("'", src.TypeName(), "' object is not iterable"));
    }
  }
  for (auto& [k, v] : args.keyword) d.dict().Put(k, v);
  return d;
}

}  // namespace

absl::Status EvalContext::CheckSize(size_t bytes) const {
  if (bytes <= max_string_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "template produced a value larger than the limit of ", max_string_bytes_, " bytes"));
}

absl::Status EvalContext::CheckItems(size_t items) const {
  if (items <= max_items_) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("template produced a sequence longer than the limit of ", max_items_, " items"));
}

absl::Status EvalContext::Step(uint64_t n) {
  steps_ += n;
  if (steps_ <= max_steps_) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("template exceeded the limit of ", max_steps_, " evaluation steps"));
}

const TestImpl* FindTest(std::string_view name) {
  for (const TestImpl& t : kTests) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const Value* FindArg(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

void AddGlobals(EvalContext* ctx, ValueDict* globals) {
  globals->Put("range", Value::Function("range", [ctx](CallArgs& a) { return Range(ctx, a); }));
  globals->Put("dict", Value::Function("dict", [](CallArgs& a) { return MakeDict(a, DictKind::kDict); }));
  globals->Put("namespace", Value::Function("namespace", [](CallArgs& a) {
                 return MakeDict(a, DictKind::kNamespace);
               }));
}

Value NoAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no attribute '", AbslView(name), "'"));
}

Value GetAttribute(EvalContext* ctx, const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return obj;  // chainable: keeps naming the root
    case Value::Kind::kDict: {
      if (obj.dict().kind() == DictKind::kDict) {
        if (std::optional<Value> m = BindMethod(ctx, obj, name)) return *m;
      }
      if (const Value* v = obj.dict().Find(name)) return *v;
      return NoAttribute(obj, name);
    }
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (std::optional<Value> m = BindMethod(ctx, obj, name)) return *m;
      return NoAttribute(obj, name);
    default: return NoAttribute(obj, name);
  }
}

Value GetItem(EvalContext* ctx, const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (const Value* v = obj.dict().Find(key)) return *v;
      break;
    case Value::Kind::kList:
      if (key.is_int() || key.is_bool()) {
        const auto& items = obj.list().items;
        if (auto i = NormIndex(key.as_int(), items.size())) return items[*i];
        return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no element ", key.as_int()));
      }
      break;
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        const std::string& s = obj.as_string();
        if (IsAscii(s)) {
          if (auto i = NormIndex(key.as_int(), s.size())) return Value(s.substr(*i, 1));
        } else {
          std::vector<uint32_t> cps = DecodeUtf8(s);
          if (auto i = NormIndex(key.as_int(), cps.size())) return Value(EncodeUtf8(cps, *i, *i + 1));
        }
        return Value::Undefined(absl::StrCat("'str object' has no element ", key.as_int()));
      }
      break;
    case Value::Kind::kUndefined: return obj;
    default: break;
  }
  if (key.is_string()) return GetAttribute(ctx, obj, key.as_string());
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no element ", AbslView(key.Repr())));
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start_v, const Value& stop_v,
                            const Value& step_v) {
  if (obj.is_undefined()) return obj;
  if (!obj.is_list() && !obj.is_string()) {
    return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  auto index_of = [](const Value& v) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.as_int());
    return TypeError("slice indices must be integers or None");
  };
  ASSIGN_OR_RETURN(std::optional<int64_t> start, index_of(start_v));
  ASSIGN_OR_RETURN(std::optional<int64_t> stop, index_of(stop_v));
  ASSIGN_OR_RETURN(std::optional<int64_t> step_opt, index_of(step_v));
  const int64_t step = step_opt.value_or(1);
  if (step == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  std::vector<uint32_t> cps;
  const bool is_str = obj.is_string();
  if (is_str) cps = DecodeUtf8(obj.as_string());
  const int64_t len = static_cast<int64_t>(is_str ? cps.size() : obj.list().items.size());
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t b = adjust(start, step < 0 ? len - 1 : 0);
  const int64_t e = adjust(stop, step < 0 ? -1 : len);
  std::vector<size_t> picks;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) picks.push_back(static_cast<size_t>(i));
  if (is_str) {
    std::string out;
    for (size_t i : picks) AppendUtf8(cps[i], &out);
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (size_t i : picks) out.push_back(obj.list().items[i]);
  return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>();
    case Value::Kind::kList: return v.list().items;
    case Value::Kind::kDict: {
      if (v.dict().kind() != DictKind::kDict) break;
      std::vector<Value> keys;
      for (const auto& [k, val] : v.dict().entries()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      std::string buf;
      for (uint32_t cp : DecodeUtf8(v.as_string())) {
        buf.clear();
        AppendUtf8(cp, &buf);
        chars.emplace_back(buf);
      }
      return chars;
    }
    default: break;
  }
  return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodePointCount(v.as_string()));
    case Value::Kind::kList: return static_cast<int64_t>(v.list().items.size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().size());
    default: return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

}  // namespace moesplit::chat::internal
