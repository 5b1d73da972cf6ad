// Value: the dynamic, Python-like value type of the Jinja interpreter.
//
// A Value is one of: Undefined (jinja2's default Undefined, carrying the name
// that was looked up, for error messages), None, bool, int (int64), float
// (double), str (UTF-8 bytes; string operations count code points), list or
// tuple, dict (insertion-ordered, Python dict semantics; also used for
// `namespace()` objects and the `loop` object), and callable (macros,
// builtin functions, bound methods).
//
// Ownership: scalars and strings are held by value. Lists, dicts and
// callables are reference types shared through std::shared_ptr, like Python
// objects: copying a Value that holds a list shares the list, so
// `ns.x = ...` and `list.append()` are seen through every copy.
//
// Conversions follow Python: Str() is str(x) (None → "None", True → "True",
// floats as repr(), containers as repr()), Repr() is repr(x), ToJson() is
// json.dumps(x, ensure_ascii=..., indent=..., separators=...) as HF
// transformers' `tojson` filter calls it.
//
// Thread-safety: a Value must not be mutated concurrently; immutable values
// (as produced by FromJson and never mutated) may be read from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moesplit::chat {

class Value;

struct CallArgs;
struct Callable;
struct ValueList;
class ValueDict;
using NativeFunction = std::function<absl::StatusOr<Value>(CallArgs&)>;

// What a dict-shaped object is: a plain dict has Python dict methods
// (items, get, ...) reachable as attributes; a namespace and the loop object
// expose only their entries as attributes.
enum class DictKind : uint8_t { kDict, kNamespace, kLoop };

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable
  };

  Value() : data_(UndefinedTag{}) {}  // Undefined
  Value(bool b) : data_(b) {}  // NOLINT(runtime/explicit)
  Value(int v) : data_(int64_t{v}) {}  // NOLINT
  Value(int64_t v) : data_(v) {}  // NOLINT
  Value(double v) : data_(v) {}  // NOLINT
  Value(std::string s) : data_(std::move(s)) {}  // NOLINT
  Value(std::string_view s) : data_(std::string(s)) {}  // NOLINT
  Value(const char* s) : data_(std::string(s)) {}  // NOLINT

  static Value Undefined(std::string hint = "") { return Value(UndefinedTag{std::move(hint)}); }
  static Value None() { return Value(NoneTag{}); }
  static Value List(std::vector<Value> items = {});
  static Value Tuple(std::vector<Value> items);
  static Value Dict(DictKind kind = DictKind::kDict);
  static Value Function(std::string name, NativeFunction fn);

  // JSON → Value: objects keep their key order (use nlohmann::ordered_json to
  // keep the caller's order; nlohmann::json has already sorted keys).
  // InvalidArgument when nested deeper than kMaxDepth.
  static absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json);
  static absl::StatusOr<Value> FromJson(const nlohmann::json& json);

  // Containers nested deeper than this are refused by FromJson/ToJson and
  // printed as "..." by Repr, so no conversion recurses without bound.
  static constexpr int kMaxDepth = 256;

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (bool is an int in Python).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }  // list or tuple
  bool is_tuple() const;
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  // REQUIRES: the matching kind (as_int accepts bool; as_float accepts any number).
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;
  double as_float() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  ValueList& list() const { return *std::get<std::shared_ptr<ValueList>>(data_); }
  ValueDict& dict() const { return *std::get<std::shared_ptr<ValueDict>>(data_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // The name an Undefined came from ("" when unknown).
  const std::string& undefined_hint() const { return std::get<UndefinedTag>(data_).hint; }
  // Identity of a container (for `is sameas`); nullptr for scalars.
  const void* identity() const;

  // Python truthiness; Undefined is false.
  bool Truthy() const;
  // Python type name: 'str', 'int', 'float', 'bool', 'NoneType', 'list',
  // 'tuple', 'dict', 'Namespace', 'LoopContext', 'function', 'Undefined'.
  std::string TypeName() const;
  // str(x); Undefined prints as "".
  std::string Str() const;
  // repr(x).
  std::string Repr() const;

  struct JsonOptions {
    std::optional<std::string> indent;  // nullopt: one line
    bool ensure_ascii = false;
    std::optional<std::string> item_separator;  // default ", " (no indent) or ","
    std::optional<std::string> key_separator;   // default ": "
    bool sort_keys = false;
  };
  // json.dumps(x, ...). InvalidArgument for Undefined/callable values and
  // non-string-able keys, as Python raises TypeError.
  absl::StatusOr<std::string> ToJson(const JsonOptions& options) const;

 private:
  struct UndefinedTag { std::string hint; };
  struct NoneTag {};
  using Data = std::variant<UndefinedTag, NoneTag, bool, int64_t, double, std::string,
                            std::shared_ptr<ValueList>, std::shared_ptr<ValueDict>,
                            std::shared_ptr<const Callable>>;
  explicit Value(Data d) : data_(std::move(d)) {}
  friend class ValueDict;
  friend struct ValueList;
  friend void ReleaseIteratively(std::vector<Value>* stack);
  // Moves the children of a container that nothing else shares onto stack.
  void StealUniqueChildren(std::vector<Value>* stack);

  Data data_;
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  NativeFunction fn;
};

struct ValueList {
  ValueList() = default;
  ValueList(const ValueList&) = delete;
  ValueList(ValueList&&) = default;
  ValueList& operator=(const ValueList&) = delete;
  ~ValueList();  // releases nested containers iteratively (no deep recursion)

  std::vector<Value> items;
  bool is_tuple = false;
};

// Insertion-ordered dict. Keys are hashable Values (str, int, float, bool,
// None); 1, 1.0 and True are the same key, as in Python.
class ValueDict {
 public:
  explicit ValueDict(DictKind kind = DictKind::kDict) : kind_(kind) {}
  ValueDict(const ValueDict&) = delete;
  ValueDict& operator=(const ValueDict&) = delete;
  ValueDict(ValueDict&&) = default;
  ValueDict& operator=(ValueDict&&) = default;
  ~ValueDict();  // releases nested containers iteratively (no deep recursion)

  DictKind kind() const { return kind_; }
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

  // nullptr when absent.
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  const Value* Find(const char* key) const { return Find(std::string_view(key)); }
  const Value* Find(const std::string& key) const { return Find(std::string_view(key)); }
  // InvalidArgument for an unhashable key (list, dict, callable, undefined).
  absl::Status Set(Value key, Value value);
  void Put(std::string key, Value value);  // string key; never fails
  // The value of the i-th entry (insertion order). REQUIRES: i < size().
  Value& MutableValueAt(size_t i) { return entries_[i].second; }
  // Removes the key; returns whether it was present.
  bool Erase(const Value& key);

 private:
  friend class Value;
  DictKind kind_;
  std::vector<std::pair<Value, Value>> entries_;
  absl::flat_hash_map<std::string, size_t> index_;  // KeyString(key) → entry
};

// Python `a == b` (1 == 1.0 == True; list != tuple; Undefined == Undefined).
bool ValuesEqual(const Value& a, const Value& b);
void ReleaseIteratively(std::vector<Value>* stack);
// Python `a < b` for numbers, strings, lists/tuples of the same kind;
// InvalidArgument otherwise ("'<' not supported between ...").
absl::StatusOr<bool> ValueLess(const Value& a, const Value& b);
// Python repr() of a float: shortest round-trip digits, e.g. 1.0, 1e+16, 0.0001.
std::string FormatPythonFloat(double v);
// Python repr() of a str.
std::string PythonStringRepr(std::string_view s);

}  // namespace moesplit::chat
