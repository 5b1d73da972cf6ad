// Python methods of str, dict and list values, bound on attribute access
// (`message.content.startswith('x')`, `d.items()`, `ns.list.append(x)`).
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/builtins.h"
#include "common/chat/internal/operators.h"
#include "common/chat/internal/strings.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat::internal {
namespace {

using MethodFn = absl::StatusOr<Value> (*)(EvalContext&, const Value&, CallArgs&);
struct Method {
  std::string_view name;
  MethodFn fn;
};

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", AbslView(message)));
}

// Positional-or-keyword argument i named `name`, Undefined when missing.
Value Arg(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = FindArg(a, i, name);
  return v ? *v : Value();
}
bool Given(const Value& v) { return !v.is_undefined() && !v.is_none(); }

absl::StatusOr<std::optional<std::string>> OptStr(const Value& v, std::string_view what) {
  if (!Given(v)) return std::optional<std::string>();
  if (!v.is_string()) return TypeError(absl::StrCat(AbslView(what), " must be str or None, not ", v.TypeName()));
  return std::optional<std::string>(v.as_string());
}

absl::StatusOr<std::optional<int64_t>> OptInt(const Value& v) {
  if (!Given(v)) return std::optional<int64_t>();
  if (!v.is_int() && !v.is_bool()) return TypeError("slice indices must be integers or None");
  return std::optional<int64_t>(v.as_int());
}

absl::StatusOr<std::string> StrArg(const Value& v, std::string_view what) {
  if (!v.is_string()) return TypeError(absl::StrCat(AbslView(what), " must be str, not ", v.TypeName()));
  return v.as_string();
}

Value StrList(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return Value::List(std::move(out));
}

// ---------------------------------------------------------------- str

absl::StatusOr<Value> Strip(const Value& s, CallArgs& a, bool l, bool r) {
  ASSIGN_OR_RETURN(auto chars, OptStr(Arg(a, 0, "chars"), "strip arg"));
  return Value(PyStrip(s.as_string(), chars, l, r));
}
absl::StatusOr<Value> SStrip(EvalContext&, const Value& s, CallArgs& a) { return Strip(s, a, true, true); }
absl::StatusOr<Value> SLstrip(EvalContext&, const Value& s, CallArgs& a) { return Strip(s, a, true, false); }
absl::StatusOr<Value> SRstrip(EvalContext&, const Value& s, CallArgs& a) { return Strip(s, a, false, true); }

absl::StatusOr<Value> Split(const Value& s, CallArgs& a, bool right) {
  ASSIGN_OR_RETURN(auto sep, OptStr(Arg(a, 0, "sep"), "sep"));
  const Value m = Arg(a, 1, "maxsplit");
  const int64_t maxsplit = (m.is_int() || m.is_bool()) ? m.as_int() : -1;
  ASSIGN_OR_RETURN(auto parts, PySplit(s.as_string(), sep, maxsplit, right));
  return StrList(parts);
}
absl::StatusOr<Value> SSplit(EvalContext&, const Value& s, CallArgs& a) { return Split(s, a, false); }
absl::StatusOr<Value> SRsplit(EvalContext&, const Value& s, CallArgs& a) { return Split(s, a, true); }
absl::StatusOr<Value> SSplitlines(EvalContext&, const Value& s, CallArgs& a) {
  return StrList(PySplitLines(s.as_string(), Arg(a, 0, "keepends").Truthy()));
}

absl::StatusOr<Value> AffixTest(const Value& s, CallArgs& a, bool prefix) {
  const Value what = Arg(a, 0, prefix ? "prefix" : "suffix");
  ASSIGN_OR_RETURN(auto start, OptInt(Arg(a, 1, "start")));
  ASSIGN_OR_RETURN(auto end, OptInt(Arg(a, 2, "end")));
  std::string subject = s.as_string();
  if (start || end) {
    ASSIGN_OR_RETURN(Value sliced, Slice(s, start ? Value(*start) : Value(), end ? Value(*end) : Value(), Value()));
    subject = sliced.as_string();
  }
  std::vector<Value> options;
  if (what.is_tuple()) options = what.list().items;
  else options.push_back(what);
  for (const Value& o : options) {
    if (!o.is_string()) {
      return TypeError(absl::StrCat(prefix ? "startswith" : "endswith",
                                    " first arg must be str or a tuple of str, not ", o.TypeName()));
    }
    const std::string& x = o.as_string();
    if (x.size() > subject.size()) continue;
    if (prefix ? subject.compare(0, x.size(), x) == 0
               : subject.compare(subject.size() - x.size(), x.size(), x) == 0) {
      return Value(true);
    }
  }
  return Value(false);
}
absl::StatusOr<Value> SStartswith(EvalContext&, const Value& s, CallArgs& a) { return AffixTest(s, a, true); }
absl::StatusOr<Value> SEndswith(EvalContext&, const Value& s, CallArgs& a) { return AffixTest(s, a, false); }

absl::StatusOr<Value> SUpper(EvalContext&, const Value& s, CallArgs&) { return Value(Upper(s.as_string())); }
absl::StatusOr<Value> SLower(EvalContext&, const Value& s, CallArgs&) { return Value(Lower(s.as_string())); }
absl::StatusOr<Value> STitle(EvalContext&, const Value& s, CallArgs&) { return Value(PyTitle(s.as_string())); }
absl::StatusOr<Value> SCapitalize(EvalContext&, const Value& s, CallArgs&) { return Value(PyCapitalize(s.as_string())); }
absl::StatusOr<Value> SSwapcase(EvalContext&, const Value& s, CallArgs&) { return Value(PySwapcase(s.as_string())); }

absl::StatusOr<Value> SReplace(EvalContext& ctx, const Value& s, CallArgs& a) {
  ASSIGN_OR_RETURN(std::string old, StrArg(Arg(a, 0, "old"), "replace() argument 1"));
  ASSIGN_OR_RETURN(std::string repl, StrArg(Arg(a, 1, "new"), "replace() argument 2"));
  const Value c = Arg(a, 2, "count");
  ASSIGN_OR_RETURN(std::string out, PyReplace(ctx, s.as_string(), old, repl, c.is_int() ? c.as_int() : -1));
  return Value(std::move(out));
}

absl::StatusOr<Value> Find(const Value& s, CallArgs& a, bool reverse, bool raise) {
  ASSIGN_OR_RETURN(std::string sub, StrArg(Arg(a, 0, "sub"), "substring"));
  ASSIGN_OR_RETURN(auto start, OptInt(Arg(a, 1, "start")));
  ASSIGN_OR_RETURN(auto end, OptInt(Arg(a, 2, "end")));
  const int64_t i = PyFind(s.as_string(), sub, start, end, reverse);
  if (i < 0 && raise) return absl::InvalidArgumentError("ValueError: substring not found");
  return Value(i);
}
absl::StatusOr<Value> SFind(EvalContext&, const Value& s, CallArgs& a) { return Find(s, a, false, false); }
absl::StatusOr<Value> SRfind(EvalContext&, const Value& s, CallArgs& a) { return Find(s, a, true, false); }
absl::StatusOr<Value> SIndex(EvalContext&, const Value& s, CallArgs& a) { return Find(s, a, false, true); }
absl::StatusOr<Value> SRindex(EvalContext&, const Value& s, CallArgs& a) { return Find(s, a, true, true); }

absl::StatusOr<Value> SCount(EvalContext&, const Value& s, CallArgs& a) {
  ASSIGN_OR_RETURN(std::string sub, StrArg(Arg(a, 0, "sub"), "substring"));
  return Value(PyCount(s.as_string(), sub));
}

absl::StatusOr<Value> SJoin(EvalContext& ctx, const Value& s, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(Arg(a, 0, "iterable")));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ", items[i].TypeName(), " found"));
    }
    if (i > 0) out += s.as_string();
    out += items[i].as_string();
    RETURN_IF_ERROR(ctx.CheckSize(out.size()));
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> CharClass(const Value& s, bool (*pred)(uint32_t)) {
  std::vector<uint32_t> cps = DecodeUtf8(s.as_string());
  if (cps.empty()) return Value(false);
  return Value(std::all_of(cps.begin(), cps.end(), pred));
}
absl::StatusOr<Value> SIsdigit(EvalContext&, const Value& s, CallArgs&) { return CharClass(s, IsDigit); }
absl::StatusOr<Value> SIsalpha(EvalContext&, const Value& s, CallArgs&) { return CharClass(s, IsAlpha); }
absl::StatusOr<Value> SIsalnum(EvalContext&, const Value& s, CallArgs&) {
  return CharClass(s, [](uint32_t c) { return IsAlpha(c) || IsDigit(c); });
}
absl::StatusOr<Value> SIsspace(EvalContext&, const Value& s, CallArgs&) { return CharClass(s, IsPySpace); }
absl::StatusOr<Value> CaseClass(const Value& s, bool upper) {
  bool cased = false;
  for (uint32_t cp : DecodeUtf8(s.as_string())) {
    if (upper ? IsLower(cp) : IsUpper(cp)) return Value(false);
    if (IsLower(cp) || IsUpper(cp)) cased = true;
  }
  return Value(cased);
}
absl::StatusOr<Value> SIsupper(EvalContext&, const Value& s, CallArgs&) { return CaseClass(s, true); }
absl::StatusOr<Value> SIslower(EvalContext&, const Value& s, CallArgs&) { return CaseClass(s, false); }

absl::StatusOr<Value> Pad(EvalContext& ctx, const Value& s, CallArgs& a, PadAlign align) {
  const Value w = Arg(a, 0, "width");
  if (!w.is_int() && !w.is_bool()) return TypeError("width must be an integer");
  const Value f = Arg(a, 1, "fillchar");
  std::string fill = " ";
  if (!f.is_undefined()) {
    if (!f.is_string() || CodePointCount(f.as_string()) != 1) {
      return TypeError("The fill character must be exactly one character long");
    }
    fill = f.as_string();
  }
  RETURN_IF_ERROR(ctx.CheckSize(static_cast<size_t>(std::max<int64_t>(0, w.as_int())) * fill.size()));
  return Value(PyPad(s.as_string(), w.as_int(), fill, align));
}
absl::StatusOr<Value> SCenter(EvalContext& c, const Value& s, CallArgs& a) { return Pad(c, s, a, PadAlign::kCenter); }
absl::StatusOr<Value> SLjust(EvalContext& c, const Value& s, CallArgs& a) { return Pad(c, s, a, PadAlign::kLeft); }
absl::StatusOr<Value> SRjust(EvalContext& c, const Value& s, CallArgs& a) { return Pad(c, s, a, PadAlign::kRight); }

absl::StatusOr<Value> SZfill(EvalContext& ctx, const Value& s, CallArgs& a) {
  const Value w = Arg(a, 0, "width");
  if (!w.is_int()) return TypeError("width must be an integer");
  RETURN_IF_ERROR(ctx.CheckSize(static_cast<size_t>(std::max<int64_t>(0, w.as_int()))));
  std::string str = s.as_string();
  const int64_t len = static_cast<int64_t>(CodePointCount(str));
  if (w.as_int() <= len) return Value(str);
  const size_t sign = (!str.empty() && (str[0] == '+' || str[0] == '-')) ? 1 : 0;
  str.insert(sign, std::string(static_cast<size_t>(w.as_int() - len), '0'));
  return Value(std::move(str));
}

absl::StatusOr<Value> Partition(const Value& s, CallArgs& a, bool right) {
  ASSIGN_OR_RETURN(std::string sep, StrArg(Arg(a, 0, "sep"), "sep"));
  if (sep.empty()) return absl::InvalidArgumentError("ValueError: empty separator");
  const std::string& str = s.as_string();
  const size_t hit = right ? str.rfind(sep) : str.find(sep);
  if (hit == std::string::npos) {
    return right ? Value::Tuple({Value(""), Value(""), Value(str)}) : Value::Tuple({Value(str), Value(""), Value("")});
  }
  return Value::Tuple({Value(str.substr(0, hit)), Value(sep), Value(str.substr(hit + sep.size()))});
}
absl::StatusOr<Value> SPartition(EvalContext&, const Value& s, CallArgs& a) { return Partition(s, a, false); }
absl::StatusOr<Value> SRpartition(EvalContext&, const Value& s, CallArgs& a) { return Partition(s, a, true); }

absl::StatusOr<Value> SRemoveprefix(EvalContext&, const Value& s, CallArgs& a) {
  ASSIGN_OR_RETURN(std::string p, StrArg(Arg(a, 0, "prefix"), "prefix"));
  const std::string& str = s.as_string();
  return Value(str.compare(0, p.size(), p) == 0 ? str.substr(p.size()) : str);
}
absl::StatusOr<Value> SRemovesuffix(EvalContext&, const Value& s, CallArgs& a) {
  ASSIGN_OR_RETURN(std::string p, StrArg(Arg(a, 0, "suffix"), "suffix"));
  const std::string& str = s.as_string();
  if (!p.empty() && str.size() >= p.size() && str.compare(str.size() - p.size(), p.size(), p) == 0) {
    return Value(str.substr(0, str.size() - p.size()));
  }
  return Value(str);
}

// str.format: fields {}, {0}, {name}, {name.attr}, {name[key]}, !r/!s, and
// format specs [[fill]align][sign][0][width][.precision][type].
absl::StatusOr<std::string> ApplySpec(const Value& v, std::string_view spec) {
  std::string fill = " ";
  char align = 0, sign = 0, type = 0;
  size_t i = 0;
  std::vector<uint32_t> cps = DecodeUtf8(spec);
  auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    fill.clear();
    AppendUtf8(cps[0], &fill);
    align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '0') { if (!align) { fill = "0"; align = '='; } ++i; }
  int width = 0, precision = -1;
  while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') width = std::min(width * 10 + static_cast<int>(cps[i++] - '0'), 4096);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    precision = 0;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') precision = std::min(precision * 10 + static_cast<int>(cps[i++] - '0'), 100);
  }
  if (i < cps.size()) type = static_cast<char>(cps[i++]);
  if (i != cps.size()) return absl::InvalidArgumentError("ValueError: invalid format specifier");
  std::string body;
  char buf[512];
  std::string flags = sign ? std::string(1, sign) : "";
  if (type == 0 && v.is_string()) type = 's';
  if (type == 0 && v.is_float()) type = precision >= 0 ? 'g' : 'r';
  if (type == 0 && v.is_number()) type = 'd';
  switch (type) {
    case 's':
      body = v.Str();
      if (precision >= 0) { auto c = DecodeUtf8(body); body = EncodeUtf8(c, 0, std::min(c.size(), static_cast<size_t>(precision))); }
      break;
    case 'r': body = v.Str(); break;
    case 'd': case 'x': case 'X': case 'o':
      if (!v.is_int() && !v.is_bool()) return absl::InvalidArgumentError("ValueError: unknown format code for non-integer");
      std::snprintf(buf, sizeof(buf), ("%" + flags + "ll" + std::string(1, type)).c_str(), static_cast<long long>(v.as_int()));
      body = buf;
      break;
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case '%': {
      if (!v.is_number()) return absl::InvalidArgumentError("ValueError: unknown format code for non-number");
      const double d = type == '%' ? v.as_float() * 100 : v.as_float();
      const char t = type == '%' ? 'f' : type;
      std::snprintf(buf, sizeof(buf), ("%" + flags + "." + std::to_string(precision < 0 ? 6 : precision) + t).c_str(), d);
      body = buf;
      if (type == '%') body += "%";
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("ValueError: unknown format code '", std::string(1, type), "'"));
  }
  if (!align) align = v.is_string() ? '<' : '>';
  if (align == '=') {
    const size_t sgn = (!body.empty() && (body[0] == '+' || body[0] == '-' || body[0] == ' ')) ? 1 : 0;
    std::string padded = PyPad(body.substr(sgn), width - static_cast<int64_t>(sgn), fill, PadAlign::kRight);
    return body.substr(0, sgn) + padded;
  }
  return PyPad(body, width, fill, align == '<' ? PadAlign::kLeft : align == '>' ? PadAlign::kRight : PadAlign::kCenter);
}

absl::StatusOr<Value> ResolveField(EvalContext& ctx, std::string_view field, const CallArgs& a, size_t* auto_index) {
  size_t i = 0;
  while (i < field.size() && field[i] != '.' && field[i] != '[') ++i;
  std::string_view head = field.substr(0, i);
  Value v;
  if (head.empty()) {
    if (*auto_index >= a.positional.size()) return absl::InvalidArgumentError("IndexError: Replacement index out of range");
    v = a.positional[(*auto_index)++];
  } else if (std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const size_t idx = static_cast<size_t>(std::min<long>(std::strtol(std::string(head).c_str(), nullptr, 10), 1 << 20));
    if (idx >= a.positional.size()) return absl::InvalidArgumentError("IndexError: Replacement index out of range");
    v = a.positional[idx];
  } else {
    const Value* kw = FindArg(a, SIZE_MAX, head);
    if (kw == nullptr) return absl::InvalidArgumentError(absl::StrCat("KeyError: '", AbslView(head), "'"));
    v = *kw;
  }
  while (i < field.size()) {
    if (field[i] == '.') {
      size_t j = i + 1;
      while (j < field.size() && field[j] != '.' && field[j] != '[') ++j;
      v = GetAttribute(&ctx, v, field.substr(i + 1, j - i - 1));
      i = j;
    } else {
      const size_t close = field.find(']', i);
      if (close == std::string_view::npos) return absl::InvalidArgumentError("ValueError: Missing ']' in format string");
      std::string key(field.substr(i + 1, close - i - 1));
      const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      v = GetItem(&ctx, v, numeric ? Value(static_cast<int64_t>(std::strtoll(key.c_str(), nullptr, 10))) : Value(key));
      i = close + 1;
    }
  }
  return v;
}

absl::StatusOr<Value> SFormat(EvalContext& ctx, const Value& s, CallArgs& a) {
  const std::string& fmt = s.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out.push_back('}'); ++i; continue; }
      return absl::InvalidArgumentError("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') { out.push_back(c); continue; }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out.push_back('{'); ++i; continue; }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return absl::InvalidArgumentError("ValueError: Single '{' encountered in format string");
    std::string_view field = std::string_view(fmt).substr(i + 1, close - i - 1);
    std::string_view spec;
    char conv = 0;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) { spec = field.substr(colon + 1); field = field.substr(0, colon); }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 's';
      field = field.substr(0, bang);
    }
    ASSIGN_OR_RETURN(Value v, ResolveField(ctx, field, a, &auto_index));
    if (conv == 'r' || conv == 'a') v = Value(v.Repr());
    else if (conv == 's') v = Value(v.Str());
    ASSIGN_OR_RETURN(std::string piece, ApplySpec(v, spec));
    out += piece;
    RETURN_IF_ERROR(ctx.CheckSize(out.size()));
    i = close;
  }
  return Value(std::move(out));
}

const Method kStrMethods[] = {
    {"strip", SStrip}, {"lstrip", SLstrip}, {"rstrip", SRstrip}, {"split", SSplit},
    {"rsplit", SRsplit}, {"splitlines", SSplitlines}, {"startswith", SStartswith},
    {"endswith", SEndswith}, {"upper", SUpper}, {"lower", SLower}, {"title", STitle},
    {"capitalize", SCapitalize}, {"swapcase", SSwapcase}, {"replace", SReplace}, {"find", SFind},
    {"rfind", SRfind}, {"index", SIndex}, {"rindex", SRindex}, {"count", SCount}, {"join", SJoin},
    {"format", SFormat}, {"isdigit", SIsdigit}, {"isalpha", SIsalpha}, {"isalnum", SIsalnum},
    {"isspace", SIsspace}, {"isupper", SIsupper}, {"islower", SIslower}, {"center", SCenter},
    {"ljust", SLjust}, {"rjust", SRjust}, {"zfill", SZfill}, {"partition", SPartition},
    {"rpartition", SRpartition}, {"removeprefix", SRemoveprefix}, {"removesuffix", SRemovesuffix},
};

// ---------------------------------------------------------------- dict

absl::StatusOr<Value> DGet(EvalContext&, const Value& d, CallArgs& a) {
  const Value* v = d.dict().Find(Arg(a, 0, "key"));
  if (v != nullptr) return *v;
  const Value* dflt = FindArg(a, 1, "default");
  return dflt ? *dflt : Value::None();
}
absl::StatusOr<Value> DItems(EvalContext&, const Value& d, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().entries()) out.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(out));
}
absl::StatusOr<Value> DKeys(EvalContext&, const Value& d, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().entries()) out.push_back(k);
  return Value::List(std::move(out));
}
absl::StatusOr<Value> DValues(EvalContext&, const Value& d, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().entries()) out.push_back(v);
  return Value::List(std::move(out));
}
absl::StatusOr<Value> DCopy(EvalContext&, const Value& d, CallArgs&) {
  Value out = Value::Dict();
  for (const auto& [k, v] : d.dict().entries()) RETURN_IF_ERROR(out.dict().Set(k, v));
  return out;
}
absl::StatusOr<Value> DUpdate(EvalContext& ctx, const Value& d, CallArgs& a) {
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (!src.is_dict()) return TypeError("dict.update() expects a mapping");
    for (const auto& [k, v] : src.dict().entries()) RETURN_IF_ERROR(d.dict().Set(k, v));
  }
  for (const auto& [k, v] : a.keyword) d.dict().Put(k, v);
  RETURN_IF_ERROR(ctx.CheckItems(d.dict().size()));
  return Value::None();
}
absl::StatusOr<Value> DPop(EvalContext&, const Value& d, CallArgs& a) {
  const Value key = Arg(a, 0, "key");
  const Value* v = d.dict().Find(key);
  if (v == nullptr) {
    const Value* dflt = FindArg(a, 1, "default");
    if (dflt != nullptr) return *dflt;
    return absl::InvalidArgumentError(absl::StrCat("KeyError: ", AbslView(key.Repr())));
  }
  Value out = *v;
  d.dict().Erase(key);
  return out;
}
absl::StatusOr<Value> DSetdefault(EvalContext&, const Value& d, CallArgs& a) {
  const Value key = Arg(a, 0, "key");
  if (const Value* v = d.dict().Find(key)) return *v;
  const Value* dflt = FindArg(a, 1, "default");
  const Value value = dflt ? *dflt : Value::None();
  RETURN_IF_ERROR(d.dict().Set(key, value));
  return value;
}

const Method kDictMethods[] = {
    {"get", DGet}, {"items", DItems}, {"keys", DKeys}, {"values", DValues}, {"copy", DCopy},
    {"update", DUpdate}, {"pop", DPop}, {"setdefault", DSetdefault},
};

// ---------------------------------------------------------------- list

absl::StatusOr<Value> LAppend(EvalContext& ctx, const Value& l, CallArgs& a) {
  if (a.positional.size() != 1) return TypeError("append() takes exactly one argument");
  if (a.positional[0].identity() == l.identity()) return absl::InvalidArgumentError("cannot append a list to itself");
  RETURN_IF_ERROR(ctx.CheckItems(l.list().items.size() + 1));
  l.list().items.push_back(a.positional[0]);
  return Value::None();
}
absl::StatusOr<Value> LExtend(EvalContext& ctx, const Value& l, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(Arg(a, 0, "iterable")));
  RETURN_IF_ERROR(ctx.CheckItems(l.list().items.size() + items.size()));
  l.list().items.insert(l.list().items.end(), items.begin(), items.end());
  return Value::None();
}
absl::StatusOr<Value> LInsert(EvalContext& ctx, const Value& l, CallArgs& a) {
  const Value i = Arg(a, 0, "index");
  if (!i.is_int() || a.positional.size() != 2) return TypeError("insert() expects an integer index and a value");
  if (a.positional[1].identity() == l.identity()) return absl::InvalidArgumentError("cannot insert a list into itself");
  auto& items = l.list().items;
  RETURN_IF_ERROR(ctx.CheckItems(items.size() + 1));
  int64_t idx = i.as_int();
  const int64_t n = static_cast<int64_t>(items.size());
  if (idx < 0) idx = std::max<int64_t>(0, idx + n);
  idx = std::min(idx, n);
  items.insert(items.begin() + idx, a.positional[1]);
  return Value::None();
}
absl::StatusOr<Value> LPop(EvalContext&, const Value& l, CallArgs& a) {
  auto& items = l.list().items;
  if (items.empty()) return absl::InvalidArgumentError("IndexError: pop from empty list");
  const Value i = Arg(a, 0, "index");
  int64_t idx = i.is_int() ? i.as_int() : -1;
  const int64_t n = static_cast<int64_t>(items.size());
  if (idx < 0) idx += n;
  if (idx < 0 || idx >= n) return absl::InvalidArgumentError("IndexError: pop index out of range");
  Value out = items[static_cast<size_t>(idx)];
  items.erase(items.begin() + idx);
  return out;
}
absl::StatusOr<Value> LRemove(EvalContext&, const Value& l, CallArgs& a) {
  auto& items = l.list().items;
  const Value x = Arg(a, 0, "value");
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (ValuesEqual(*it, x)) { items.erase(it); return Value::None(); }
  }
  return absl::InvalidArgumentError("ValueError: list.remove(x): x not in list");
}
absl::StatusOr<Value> LIndex(EvalContext&, const Value& l, CallArgs& a) {
  const auto& items = l.list().items;
  const Value x = Arg(a, 0, "value");
  for (size_t i = 0; i < items.size(); ++i) {
    if (ValuesEqual(items[i], x)) return Value(static_cast<int64_t>(i));
  }
  return absl::InvalidArgumentError(absl::StrCat("ValueError: ", AbslView(x.Repr()), " is not in list"));
}
absl::StatusOr<Value> LCount(EvalContext&, const Value& l, CallArgs& a) {
  const Value x = Arg(a, 0, "value");
  int64_t n = 0;
  for (const Value& v : l.list().items) n += ValuesEqual(v, x) ? 1 : 0;
  return Value(n);
}
absl::StatusOr<Value> LCopy(EvalContext&, const Value& l, CallArgs&) { return Value::List(l.list().items); }
absl::StatusOr<Value> LReverse(EvalContext&, const Value& l, CallArgs&) {
  std::reverse(l.list().items.begin(), l.list().items.end());
  return Value::None();
}

const Method kListMethods[] = {
    {"append", LAppend}, {"extend", LExtend}, {"insert", LInsert}, {"pop", LPop}, {"remove", LRemove},
    {"index", LIndex}, {"count", LCount}, {"copy", LCopy}, {"reverse", LReverse},
};
const Method kTupleMethods[] = {{"index", LIndex}, {"count", LCount}};

template <size_t N>
const Method* FindMethod(const Method (&table)[N], std::string_view name) {
  for (const Method& m : table) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

}  // namespace

std::optional<Value> BindMethod(EvalContext* ctx, const Value& obj, std::string_view name) {
  const Method* m = nullptr;
  if (obj.is_string()) m = FindMethod(kStrMethods, name);
  else if (obj.is_dict() && obj.dict().kind() == DictKind::kDict) m = FindMethod(kDictMethods, name);
  else if (obj.is_tuple()) m = FindMethod(kTupleMethods, name);
  else if (obj.is_list()) m = FindMethod(kListMethods, name);
  if (m == nullptr) return std::nullopt;
  MethodFn fn = m->fn;
  return Value::Function(std::string(name), [ctx, obj, fn](CallArgs& a) { return fn(*ctx, obj, a); });
}

}  // namespace moesplit::chat::internal
