#include "common/chat/internal/operators.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat::internal {
namespace {

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", AbslView(message)));
}

absl::Status OperandError(std::string_view sym, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", AbslView(sym), ": '",
                                a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError("integer overflow (values beyond 64-bit are not supported)");
}

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

absl::StatusOr<int64_t> IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return Overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
  }
  return result;
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n, EvalContext& ctx) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > ctx.max_string_bytes() / s.size()) {
      return ctx.CheckSize(ctx.max_string_bytes() + 1);
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.list().items;
  if (!items.empty()) RETURN_IF_ERROR(ctx.CheckItems(static_cast<uint64_t>(n) > (1ull << 40) ? (1ull << 40) : static_cast<size_t>(n) * items.size()));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<Value> NumericOp(BinOp op, const Value& a, const Value& b) {
  const bool ints = IsIntLike(a) && IsIntLike(b);
  if (ints && op != BinOp::kDiv) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    int64_t r = 0;
    switch (op) {
      case BinOp::kAdd: if (__builtin_add_overflow(x, y, &r)) return Overflow(); return Value(r);
      case BinOp::kSub: if (__builtin_sub_overflow(x, y, &r)) return Overflow(); return Value(r);
      case BinOp::kMul: if (__builtin_mul_overflow(x, y, &r)) return Overflow(); return Value(r);
      case BinOp::kFloorDiv:
      case BinOp::kMod: {
        if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: integer division or modulo by zero");
        if (y == -1) {
          if (op == BinOp::kMod) return Value(int64_t{0});
          if (x == INT64_MIN) return Overflow();
          return Value(-x);
        }
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) { --q; m += y; }
        return Value(op == BinOp::kMod ? m : q);
      }
      case BinOp::kPow:
        if (y >= 0) {
          ASSIGN_OR_RETURN(int64_t p, IntPow(x, y));
          return Value(p);
        }
        if (x == 0) return absl::InvalidArgumentError("ZeroDivisionError: 0 cannot be raised to a negative power");
        return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      default: break;
    }
  }
  const double x = a.as_float();
  const double y = b.as_float();
  switch (op) {
    case BinOp::kAdd: return Value(x + y);
    case BinOp::kSub: return Value(x - y);
    case BinOp::kMul: return Value(x * y);
    case BinOp::kDiv:
      if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
      return Value(x / y);
    case BinOp::kFloorDiv:
      if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: float floor division by zero");
      return Value(std::floor(x / y));
    case BinOp::kMod: {
      if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: float modulo");
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      if (r == 0) r = std::copysign(0.0, y);
      return Value(r);
    }
    case BinOp::kPow:
      if (x == 0 && y < 0) return absl::InvalidArgumentError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      return Value(std::pow(x, y));
    default: break;
  }
  return absl::InternalError("bad numeric operator");
}

std::string_view OpSymbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "**";
    case BinOp::kConcat: return "~";
  }
  return "?";
}

// One `%...` conversion of PercentFormat.
struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char conv = 's';
};

std::string PadString(std::string s, const Spec& spec) {
  if (spec.precision >= 0) {
    std::vector<uint32_t> cps = DecodeUtf8(s);
    if (cps.size() > static_cast<size_t>(spec.precision)) {
      s = EncodeUtf8(cps, 0, static_cast<size_t>(spec.precision));
    }
  }
  const size_t len = CodePointCount(s);
  if (spec.width > 0 && len < static_cast<size_t>(spec.width)) {
    const std::string pad(static_cast<size_t>(spec.width) - len, ' ');
    s = spec.flags.find('-') != std::string::npos ? s + pad : pad + s;
  }
  return s;
}

absl::StatusOr<std::string> FormatOne(const Spec& spec, const Value& v) {
  std::string cfmt = "%" + spec.flags;
  if (spec.width >= 0) cfmt += std::to_string(spec.width);
  if (spec.precision >= 0) cfmt += "." + std::to_string(spec.precision);
  char buf[1024];
  switch (spec.conv) {
    case 's': return PadString(v.Str(), spec);
    case 'r': case 'a': return PadString(v.Repr(), spec);
    case 'c': {
      std::string s;
      if (v.is_string() && CodePointCount(v.as_string()) == 1) s = v.as_string();
      else if (IsIntLike(v) && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) AppendUtf8(static_cast<uint32_t>(v.as_int()), &s);
      else return TypeError("%c requires int or char");
      Spec plain = spec;
      plain.precision = -1;
      return PadString(s, plain);
    }
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
      if (!v.is_number()) {
        return TypeError(absl::StrCat("%", std::string(1, spec.conv), " format: a real number is required, not ", v.TypeName()));
      }
      const double d = v.as_float();
      if (v.is_float() && (!std::isfinite(d) || std::fabs(d) >= 9.2e18)) {
        return absl::InvalidArgumentError("cannot convert float to integer");
      }
      const long long n = v.is_float() ? static_cast<long long>(d) : static_cast<long long>(v.as_int());
      const char c = spec.conv == 'i' || spec.conv == 'u' ? 'd' : spec.conv;
      std::snprintf(buf, sizeof(buf), (cfmt + "ll" + c).c_str(), n);
      return std::string(buf);
    }
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
      if (!v.is_number()) return TypeError(absl::StrCat("must be real number, not ", v.TypeName()));
      std::snprintf(buf, sizeof(buf), (cfmt + spec.conv).c_str(), v.as_float());
      return std::string(buf);
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("ValueError: unsupported format character '", std::string(1, spec.conv), "'"));
  }
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  const std::string& hint = v.undefined_hint();
  if (hint.empty()) return absl::InvalidArgumentError("UndefinedError: value is undefined");
  // A hint starting with a quote is a complete description ("'dict object'
  // has no attribute 'x'"); otherwise it is the undefined name.
  if (hint[0] == '\'') return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", AbslView(hint)));
  return absl::InvalidArgumentError(absl::StrCat("UndefinedError: '", AbslView(v.undefined_hint()), "' is undefined"));
}

absl::StatusOr<Value> BinaryOp(BinOp op, const Value& a, const Value& b, EvalContext& ctx) {
  if (op == BinOp::kConcat) {
    std::string s = a.Str();
    s += b.Str();
    RETURN_IF_ERROR(ctx.CheckSize(s.size()));
    return Value(std::move(s));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return NumericOp(op, a, b);
  switch (op) {
    case BinOp::kAdd:
      if (a.is_string() && b.is_string()) {
        RETURN_IF_ERROR(ctx.CheckSize(a.as_string().size() + b.as_string().size()));
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_string()) {
        return TypeError(absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        RETURN_IF_ERROR(ctx.CheckItems(a.list().items.size() + b.list().items.size()));
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return a.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
      }
      if (a.is_list()) {
        return TypeError(absl::StrCat("can only concatenate ", a.TypeName(), " (not \"",
                                      b.TypeName(), "\") to ", a.TypeName()));
      }
      break;
    case BinOp::kMul:
      if ((a.is_string() || a.is_list()) && IsIntLike(b)) return Repeat(a, b.as_int(), ctx);
      if ((b.is_string() || b.is_list()) && IsIntLike(a)) return Repeat(b, a.as_int(), ctx);
      break;
    case BinOp::kMod:
      if (a.is_string()) {
        ASSIGN_OR_RETURN(std::string s, PercentFormat(a.as_string(), b, ctx));
        return Value(std::move(s));
      }
      break;
    default: break;
  }
  return OperandError(OpSymbol(op), a, b);
}

absl::StatusOr<Value> Negate(const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (IsIntLike(a)) {
    if (a.as_int() == INT64_MIN) return Overflow();
    return Value(-a.as_int());
  }
  if (a.is_float()) return Value(-a.as_float());
  return TypeError(absl::StrCat("bad operand type for unary -: '", a.TypeName(), "'"));
}

absl::StatusOr<Value> UnaryPlus(const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (IsIntLike(a)) return Value(a.as_int());
  if (a.is_float()) return a;
  return TypeError(absl::StrCat("bad operand type for unary +: '", a.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list().items) {
        if (ValuesEqual(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict()) return TypeError(absl::StrCat("unhashable type: '", item.TypeName(), "'"));
      return container.dict().Find(item) != nullptr;
    default:
      return TypeError(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<bool> Compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return ValuesEqual(a, b);
    case CmpOp::kNe: return !ValuesEqual(a, b);
    case CmpOp::kIn: return Contains(b, a);
    case CmpOp::kNotIn: {
      ASSIGN_OR_RETURN(bool in, Contains(b, a));
      return !in;
    }
    default: break;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const char* sym = op == CmpOp::kLt ? "<" : op == CmpOp::kLe ? "<=" : op == CmpOp::kGt ? ">" : ">=";
  const bool swap = op == CmpOp::kGt || op == CmpOp::kGe;
  const Value& x = swap ? b : a;
  const Value& y = swap ? a : b;
  absl::StatusOr<bool> less = ValueLess(x, y);
  if (!less.ok()) {
    return TypeError(absl::StrCat("'", sym, "' not supported between instances of '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
  }
  if (op == CmpOp::kLt || op == CmpOp::kGt) return *less;
  return *less || ValuesEqual(x, y);
}

absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args, EvalContext& ctx) {
  std::vector<Value> values;
  if (args.is_tuple()) values = args.list().items;
  else values.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out.push_back(fmt[i]); continue; }
    if (++i >= fmt.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    if (fmt[i] == '%') { out.push_back('%'); continue; }
    Spec spec;
    const Value* mapped = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) return absl::InvalidArgumentError("ValueError: incomplete format key");
      if (!args.is_dict()) return TypeError("format requires a mapping");
      mapped = args.dict().Find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (mapped == nullptr) return absl::InvalidArgumentError("KeyError: format key not found");
      i = close + 1;
    }
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) spec.flags += fmt[i++];
    auto read_int = [&](int* target) {
      if (i < fmt.size() && fmt[i] == '*') {
        if (next < values.size() && values[next].is_int()) *target = static_cast<int>(std::min<int64_t>(values[next++].as_int(), 256));
        ++i;
        return;
      }
      int v = -1;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
        v = std::min((v < 0 ? 0 : v) * 10 + (fmt[i++] - '0'), 256);
      }
      *target = v;
    };
    read_int(&spec.width);
    if (i < fmt.size() && fmt[i] == '.') { ++i; read_int(&spec.precision); if (spec.precision < 0) spec.precision = 0; }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    spec.conv = fmt[i];
    const Value* arg = mapped;
    if (arg == nullptr) {
      if (next >= values.size()) return TypeError("not enough arguments for format string");
      arg = &values[next++];
    }
    ASSIGN_OR_RETURN(std::string piece, FormatOne(spec, *arg));
    out += piece;
    RETURN_IF_ERROR(ctx.CheckSize(out.size()));
  }
  if (!args.is_dict() && next < values.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace moesplit::chat::internal
