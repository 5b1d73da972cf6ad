// Builtin filters, tests, methods and global functions of the interpreter,
// following jinja2 3.1 (with HF transformers' `tojson` override) and Python
// str/dict/list semantics. Filters and tests are looked up by the parser, so
// an unknown name is a syntax error at Parse time.
//
// Supported filters: abs, attr, batch, capitalize, center, count, d,
// default, dictsort, e, escape, first, float, format, indent, int, items,
// join, last, length, list, lower, map, max, min, reject, rejectattr,
// replace, reverse, round, safe, select, selectattr, sort, string, sum,
// title, tojson, trim, unique, upper, wordcount.
// Tests: boolean, callable, defined, divisibleby, eq, equalto, escaped, even,
// false, filter, float, ge, gt, greaterthan, in, integer, iterable, le,
// lessthan, lower, lt, mapping, ne, none, number, odd, sameas, sequence,
// string, test, true, undefined, upper, ==, !=, <, <=, >, >=.
// Thread-safe: all tables are immutable.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat/value.h"

namespace moesplit::chat::internal {

// Limits and counters of one render, shared by everything that can grow.
class EvalContext {
 public:
  EvalContext(size_t max_string_bytes, size_t max_items, uint64_t max_steps)
      : max_string_bytes_(max_string_bytes), max_items_(max_items), max_steps_(max_steps) {}

  // ResourceExhausted when a string of `bytes` would exceed the limit.
  absl::Status CheckSize(size_t bytes) const;
  // ResourceExhausted when a list of `items` would exceed the limit.
  absl::Status CheckItems(size_t items) const;
  // Counts `n` units of work (loop iterations, items processed).
  absl::Status Step(uint64_t n = 1);
  size_t max_string_bytes() const { return max_string_bytes_; }

 private:
  size_t max_string_bytes_;
  size_t max_items_;
  uint64_t max_steps_;
  uint64_t steps_ = 0;
};

struct FilterImpl {
  std::string_view name;
  absl::StatusOr<Value> (*fn)(EvalContext& ctx, const Value& input, CallArgs& args);
};

struct TestImpl {
  std::string_view name;
  absl::StatusOr<bool> (*fn)(EvalContext& ctx, const Value& input, CallArgs& args);
};

const FilterImpl* FindFilter(std::string_view name);
const TestImpl* FindTest(std::string_view name);

// `obj.name` when it names a method of a str / dict / list: a callable bound
// to obj. nullopt when it is not a method.
std::optional<Value> BindMethod(EvalContext* ctx, const Value& obj, std::string_view name);

// jinja2 globals: range, dict, namespace, cycler-free subset. The callables
// capture ctx, which must outlive them.
void AddGlobals(EvalContext* ctx, ValueDict* globals);

// Attribute lookup as jinja2's getattr: dict methods first for plain dicts,
// then the key; namespace/loop entries; str/list methods. Undefined when
// absent ("'dict object' has no attribute 'x'"); an Undefined object yields
// itself, so chains keep naming their root.
Value GetAttribute(EvalContext* ctx, const Value& obj, std::string_view name);
// Item lookup obj[key] as jinja2's getitem: dict key, list/str index
// (negative from the end), then attribute. Undefined when absent.
Value GetItem(EvalContext* ctx, const Value& obj, const Value& key);
// Python slicing of list/tuple/str.
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step);

// Python iteration: list/tuple items, dict keys, str characters; Undefined
// iterates as empty. InvalidArgument for other types.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// Python len(); Undefined has length 0.
absl::StatusOr<int64_t> Length(const Value& v);

// Argument helpers for builtins: the i-th positional or the named keyword.
const Value* FindArg(const CallArgs& args, size_t index, std::string_view name);

}  // namespace moesplit::chat::internal
