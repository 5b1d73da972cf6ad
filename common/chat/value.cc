#include "common/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat {
namespace {

// Canonical hash key: 1, 1.0 and True collide as in Python.
absl::StatusOr<std::string> KeyString(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return absl::StrCat("s", AbslView(key.as_string()));
    case Value::Kind::kBool:
    case Value::Kind::kInt: return absl::StrCat("i", key.as_int());
    case Value::Kind::kFloat: {
      const double d = key.as_float();
      if (std::trunc(d) == d && std::fabs(d) < 9.2e18) {
        return absl::StrCat("i", static_cast<int64_t>(d));
      }
      return absl::StrCat("f", FormatPythonFloat(d));
    }
    case Value::Kind::kNone: return std::string("n");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unhashable type: '", key.TypeName(), "'"));
  }
}

template <typename Json>
absl::StatusOr<Value> FromJsonImpl(const Json& j, int depth) {
  if (depth > Value::kMaxDepth) {
    return absl::InvalidArgumentError("JSON input is nested too deeply");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        ASSIGN_OR_RETURN(Value v, FromJsonImpl(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::Dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        ASSIGN_OR_RETURN(Value v, FromJsonImpl(it.value(), depth + 1));
        d.dict().Put(it.key(), std::move(v));
      }
      return d;
    }
    default:  // binary, discarded
      return absl::InvalidArgumentError("unsupported JSON value type");
  }
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  const std::vector<uint32_t> cps = internal::DecodeUtf8(s);
  for (uint32_t cp : cps) {
    switch (cp) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (cp >= 0x110000) {  // invalid byte: keep raw unless ASCII is required
      if (ensure_ascii) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp - 0x110000);
        *out += buf;
      } else {
        internal::AppendUtf8(cp, out);
      }
    } else if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
    } else {
      internal::AppendUtf8(cp, out);
    }
  }
  out->push_back('"');
}

struct JsonWriter {
  const Value::JsonOptions& opt;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  void Newline(int level) {
    if (!opt.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *opt.indent;
  }

  absl::StatusOr<std::string> KeyText(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::kString: return k.as_string();
      case Value::Kind::kBool: return std::string(k.as_bool() ? "true" : "false");
      case Value::Kind::kInt: return absl::StrCat(k.as_int());
      case Value::Kind::kFloat: return FormatPythonFloat(k.as_float());
      case Value::Kind::kNone: return std::string("null");
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "keys must be str, int, float, bool or None, not ", k.TypeName()));
    }
  }

  absl::Status Write(const Value& v, int level) {
    if (level > Value::kMaxDepth) {
      return absl::InvalidArgumentError("tojson: value is nested too deeply (or circular)");
    }
    switch (v.kind()) {
      case Value::Kind::kNone: out += "null"; return absl::OkStatus();
      case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return absl::OkStatus();
      case Value::Kind::kInt: out += absl::StrCat(v.as_int()); return absl::OkStatus();
      case Value::Kind::kFloat: {
        const double d = v.as_float();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += FormatPythonFloat(d);
        return absl::OkStatus();
      }
      case Value::Kind::kString:
        AppendJsonString(v.as_string(), opt.ensure_ascii, &out);
        return absl::OkStatus();
      case Value::Kind::kList: return WriteList(v.list(), level);
      case Value::Kind::kDict:
        if (v.dict().kind() == DictKind::kDict) return WriteDict(v.dict(), level);
        [[fallthrough]];
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "Object of type ", v.TypeName(), " is not JSON serializable"));
    }
  }

  absl::Status WriteList(const ValueList& l, int level) {
    if (l.items.empty()) { out += "[]"; return absl::OkStatus(); }
    out.push_back('[');
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i > 0) out += item_sep;
      Newline(level + 1);
      RETURN_IF_ERROR(Write(l.items[i], level + 1));
    }
    Newline(level);
    out.push_back(']');
    return absl::OkStatus();
  }

  absl::Status WriteDict(const ValueDict& d, int level) {
    if (d.size() == 0) { out += "{}"; return absl::OkStatus(); }
    std::vector<std::pair<std::string, const Value*>> items;
    for (const auto& [k, val] : d.entries()) {
      ASSIGN_OR_RETURN(std::string key, KeyText(k));
      items.emplace_back(std::move(key), &val);
    }
    if (opt.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out.push_back('{');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep;
      Newline(level + 1);
      AppendJsonString(items[i].first, opt.ensure_ascii, &out);
      out += key_sep;
      RETURN_IF_ERROR(Write(*items[i].second, level + 1));
    }
    Newline(level);
    out.push_back('}');
    return absl::OkStatus();
  }
};

void AppendRepr(const Value& v, int depth, std::string* out);

void AppendSeqRepr(const ValueList& l, int depth, std::string* out) {
  out->push_back(l.is_tuple ? '(' : '[');
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i > 0) *out += ", ";
    AppendRepr(l.items[i], depth + 1, out);
  }
  if (l.is_tuple && l.items.size() == 1) out->push_back(',');
  out->push_back(l.is_tuple ? ')' : ']');
}

void AppendDictRepr(const ValueDict& d, int depth, std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [k, v] : d.entries()) {
    if (!first) *out += ", ";
    first = false;
    AppendRepr(k, depth + 1, out);
    *out += ": ";
    AppendRepr(v, depth + 1, out);
  }
  out->push_back('}');
}

void AppendRepr(const Value& v, int depth, std::string* out) {
  if (depth > Value::kMaxDepth) { *out += "..."; return; }
  switch (v.kind()) {
    case Value::Kind::kString: *out += PythonStringRepr(v.as_string()); return;
    case Value::Kind::kList: AppendSeqRepr(v.list(), depth, out); return;
    case Value::Kind::kDict: {
      const ValueDict& d = v.dict();
      if (d.kind() == DictKind::kNamespace) {
        *out += "<Namespace ";
        AppendDictRepr(d, depth, out);
        *out += ">";
      } else if (d.kind() == DictKind::kLoop) {
        const Value* index = d.Find("index");
        const Value* length = d.Find("length");
        *out += absl::StrCat("<LoopContext ", index ? AbslView(index->Str()) : "?", "/",
                             length ? AbslView(length->Str()) : "?", ">");
      } else {
        AppendDictRepr(d, depth, out);
      }
      return;
    }
    case Value::Kind::kUndefined: *out += "Undefined"; return;
    default: *out += v.Str(); return;
  }
}

}  // namespace

// ---------------------------------------------------------------- release

void ReleaseIteratively(std::vector<Value>* stack) {
  while (!stack->empty()) {
    Value v = std::move(stack->back());
    stack->pop_back();
    v.StealUniqueChildren(stack);
  }  // v is destroyed with no nested children left
}

void Value::StealUniqueChildren(std::vector<Value>* stack) {
  if (auto* l = std::get_if<std::shared_ptr<ValueList>>(&data_)) {
    if (*l && l->use_count() == 1) {
      for (Value& item : (*l)->items) stack->push_back(std::move(item));
      (*l)->items.clear();
    }
  } else if (auto* d = std::get_if<std::shared_ptr<ValueDict>>(&data_)) {
    if (*d && d->use_count() == 1) {
      for (auto& entry : (*d)->entries_) stack->push_back(std::move(entry.second));
      (*d)->entries_.clear();
      (*d)->index_.clear();
    }
  }
}

ValueList::~ValueList() {
  if (items.empty()) return;
  std::vector<Value> stack = std::move(items);
  ReleaseIteratively(&stack);
}

ValueDict::~ValueDict() {
  if (entries_.empty()) return;
  std::vector<Value> stack;
  stack.reserve(entries_.size());
  for (auto& e : entries_) stack.push_back(std::move(e.second));
  ReleaseIteratively(&stack);
}

// ---------------------------------------------------------------- dict

const Value* ValueDict::Find(const Value& key) const {
  absl::StatusOr<std::string> k = KeyString(key);
  if (!k.ok()) return nullptr;
  auto it = index_.find(*k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* ValueDict::Find(std::string_view key) const {
  auto it = index_.find(absl::StrCat("s", AbslView(key)));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

absl::Status ValueDict::Set(Value key, Value value) {
  ASSIGN_OR_RETURN(std::string k, KeyString(key));
  auto [it, inserted] = index_.try_emplace(std::move(k), entries_.size());
  if (inserted) {
    entries_.emplace_back(std::move(key), std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
  return absl::OkStatus();
}

void ValueDict::Put(std::string key, Value value) {
  Value k(std::move(key));
  auto [it, inserted] = index_.try_emplace(absl::StrCat("s", AbslView(k.as_string())),
                                           entries_.size());
  if (inserted) {
    entries_.emplace_back(std::move(k), std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

bool ValueDict::Erase(const Value& key) {
  absl::StatusOr<std::string> k = KeyString(key);
  if (!k.ok()) return false;
  auto it = index_.find(*k);
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  entries_.erase(entries_.begin() + static_cast<ptrdiff_t>(pos));
  index_.erase(it);
  for (auto& [name, idx] : index_) {
    if (idx > pos) --idx;
  }
  return true;
}

// ---------------------------------------------------------------- value

Value Value::List(std::vector<Value> items) {
  auto l = std::make_shared<ValueList>();
  l->items = std::move(items);
  return Value(Data(std::move(l)));
}

Value Value::Tuple(std::vector<Value> items) {
  auto l = std::make_shared<ValueList>();
  l->items = std::move(items);
  l->is_tuple = true;
  return Value(Data(std::move(l)));
}

Value Value::Dict(DictKind kind) { return Value(Data(std::make_shared<ValueDict>(kind))); }

Value Value::Function(std::string name, NativeFunction fn) {
  return Value(Data(std::shared_ptr<const Callable>(
      new Callable{std::move(name), std::move(fn)})));
}

absl::StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& json) {
  return FromJsonImpl(json, 0);
}
absl::StatusOr<Value> Value::FromJson(const nlohmann::json& json) {
  return FromJsonImpl(json, 0);
}

bool Value::is_tuple() const { return is_list() && list().is_tuple; }

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::kList: return &list();
    case Kind::kDict: return &dict();
    case Kind::kCallable: return &callable();
    default: return nullptr;
  }
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !list().items.empty();
    case Kind::kDict: return dict().kind() != DictKind::kDict || dict().size() > 0;
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      switch (dict().kind()) {
        case DictKind::kNamespace: return "Namespace";
        case DictKind::kLoop: return "LoopContext";
        default: return "dict";
      }
    case Kind::kCallable: return "function";
  }
  return "object";
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return absl::StrCat(as_int());
    case Kind::kFloat: return FormatPythonFloat(as_float());
    case Kind::kString: return as_string();
    case Kind::kCallable: return absl::StrCat("<function ", AbslView(callable().name), ">");
    default: return Repr();
  }
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(*this, 0, &out);
  return out;
}

absl::StatusOr<std::string> Value::ToJson(const JsonOptions& options) const {
  JsonWriter w{options, options.item_separator.value_or(options.indent ? "," : ", "),
               options.key_separator.value_or(": "), {}};
  RETURN_IF_ERROR(w.Write(*this, 0));
  return std::move(w.out);
}

// ---------------------------------------------------------------- compare

namespace {

bool EqualImpl(const Value& a, const Value& b, int depth) {
  if (depth > Value::kMaxDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ValueList& x = a.list();
      const ValueList& y = b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!EqualImpl(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const ValueDict& x = a.dict();
      const ValueDict& y = b.dict();
      if (x.kind() != DictKind::kDict || y.kind() != DictKind::kDict) return &x == &y;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.Find(k);
        if (other == nullptr || !EqualImpl(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

absl::StatusOr<bool> LessImpl(const Value& a, const Value& b, int depth) {
  if (depth > Value::kMaxDepth) {
    return absl::InvalidArgumentError("comparison: values nested too deeply");
  }
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (EqualImpl(x[i], y[i], depth + 1)) continue;
      return LessImpl(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace

bool ValuesEqual(const Value& a, const Value& b) { return EqualImpl(a, b, 0); }

absl::StatusOr<bool> ValueLess(const Value& a, const Value& b) { return LessImpl(a, b, 0); }

// ---------------------------------------------------------------- formatting

std::string FormatPythonFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') { sign = "-"; sci.erase(0, 1); }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  const int ndigits = static_cast<int>(digits.size());
  if (exp >= -5 + 1 && exp < 16) {  // Python repr: fixed for -4 <= exp < 16
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (exp + 1 >= ndigits) {
      out = digits + std::string(static_cast<size_t>(exp + 1 - ndigits), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
            digits.substr(static_cast<size_t>(exp + 1));
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (ndigits > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + ebuf;
}

std::string PythonStringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : internal::DecodeUtf8(s)) {
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (internal::IsPrintable(cp)) {
      internal::AppendUtf8(cp, &out);
    } else {
      const uint32_t c = cp >= 0x110000 ? cp - 0x110000 : cp;
      if (c < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      else if (c < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      else std::snprintf(buf, sizeof(buf), "\\U%08x", c);
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace moesplit::chat
