// GGUF model files: a validating, mmap-based reader.
//
// File layout (GGUF v2 and v3; all integers little-endian):
//   1. magic        u32  "GGUF" (0x46554747)
//   2. version      u32  2 or 3 (v1 with 32-bit counts is refused)
//   3. n_tensors    u64
//   4. n_kv         u64
//   5. n_kv times:  key (string), value type (u32), value
//        string  = u64 length + bytes (no terminator)
//        array   = element type (u32) + u64 count + elements
//   6. n_tensors times: name (string), n_dims (u32, 1..4), ne[n_dims] (u64),
//        type (u32, a ggml type id), offset (u64, relative to the data section)
//   7. padding to `general.alignment` (default 32, a power of two)
//   8. data section: each tensor at its offset, offsets multiples of alignment
//
// A model split by gguf-split (`name-00001-of-00003.gguf`, keys split.no,
// split.count, split.tensors.count) is opened from its first part and
// presented as one file: metadata from the first part, tensors from all.
//
// Every count, offset, size, shape and type is validated with overflow-safe
// arithmetic before use; a malformed file gives one InvalidArgument (or
// NotFound for a missing file) naming the file and the key or tensor.
//
// Ownership: a GgufFile owns its mappings; TensorInfo::data points into them
// and stays valid while the GgufFile lives. Thread-safe: immutable after Open.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/gguf/types.h"

namespace moesplit {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType t);

// One metadata value. Integers and bools are held as int64/uint64, floats as
// double, arrays as typed vectors (nested arrays as a vector of Values).
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  // For arrays: the element type and count.
  GgufValueType element_type() const { return element_type_; }
  size_t size() const;

  bool is_integer() const;  // any of the 8 integer types, or bool
  bool is_float() const;    // f32 / f64

  // Scalars. Integer accessors accept any integer type whose value fits.
  absl::StatusOr<uint64_t> AsUint() const;
  absl::StatusOr<int64_t> AsInt() const;
  absl::StatusOr<double> AsFloat() const;  // also accepts integers
  absl::StatusOr<bool> AsBool() const;
  absl::StatusOr<std::string_view> AsString() const;

  // Arrays (empty vectors for arrays of another element type).
  const std::vector<std::string>& strings() const { return strings_; }
  const std::vector<int64_t>& ints() const { return ints_; }  // ints + bools
  const std::vector<uint64_t>& uints() const { return uints_; }  // u64 only
  const std::vector<double>& floats() const { return floats_; }
  const std::vector<GgufValue>& arrays() const { return arrays_; }

  // Builders (used by the reader and by GgufWriter).
  static GgufValue Uint(GgufValueType t, uint64_t v);
  static GgufValue Int(GgufValueType t, int64_t v);
  static GgufValue Float(GgufValueType t, double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue IntArray(GgufValueType elem, std::vector<int64_t> v);
  static GgufValue FloatArray(GgufValueType elem, std::vector<double> v);

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;
  uint64_t u_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::vector<std::string> strings_;
  std::vector<int64_t> ints_;
  std::vector<uint64_t> uints_;
  std::vector<double> floats_;
  std::vector<GgufValue> arrays_;
};

struct GgufTensor {
  std::string name;
  int n_dims = 0;
  // ggml order: ne[0] is the innermost (contiguous) dimension; unused = 1.
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;   // within its part's data section
  uint64_t n_bytes = 0;  // validated against the file size
  int split = 0;         // which part of a split model holds it
  const uint8_t* data = nullptr;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const { return n_rows() ? n_bytes / n_rows() : 0; }
};

class GgufFile {
 public:
  // Opens and validates `path` (and its sibling parts for a split model).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (fuzzing, tests). The bytes must outlive the
  // returned object.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(
      const uint8_t* data, size_t size, std::string name = "<memory>");

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  int n_splits() const { return static_cast<int>(parts_.size()); }
  uint64_t file_bytes() const;  // all parts

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const {
    return kv_;
  }
  const GgufValue* Find(std::string_view key) const;

  // Typed lookups: NotFound naming the key when absent, InvalidArgument when
  // the type does not fit.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<const GgufValue*> GetArray(std::string_view key) const;
  // With a default when absent (type errors still fail).
  absl::StatusOr<uint64_t> GetUintOr(std::string_view key, uint64_t def) const;
  absl::StatusOr<double> GetFloatOr(std::string_view key, double def) const;
  absl::StatusOr<bool> GetBoolOr(std::string_view key, bool def) const;
  absl::StatusOr<std::string> GetStringOr(std::string_view key,
                                          std::string def) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

  // A SHA-256-free identity: FNV-1a 64 over metadata and tensor table, hex.
  std::string Identity() const;

  // Where byte `p` of a tensor's data lies on disk: its part's path and the
  // byte offset in that file (what a reader that bypasses the mapping, e.g.
  // the expert-worker's direct-I/O tier, reads). NotFound when `p` is not
  // inside a part of this file.
  struct FileLocation {
    std::string path;
    uint64_t offset = 0;
  };
  absl::StatusOr<FileLocation> Locate(const uint8_t* p) const;

 private:
  friend class GgufParser;
  struct Part;
  GgufFile() = default;

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::unique_ptr<Part>> parts_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  absl::flat_hash_map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace moesplit
