#include "common/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status.h"

namespace moesplit {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxTensorDims = 4;
constexpr uint64_t kMaxNameLength = 256;
constexpr uint64_t kMaxArrayDepth = 4;

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Bytes of one scalar element of a value type; 0 for string/array.
uint64_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool KnownValueType(uint32_t t) { return t <= 12; }

}  // namespace

std::string_view GgufValueTypeName(GgufValueType t) {
  static constexpr std::string_view kNames[] = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32",
      "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

// ---------------------------------------------------------------- GgufValue

size_t GgufValue::size() const {
  if (type_ != GgufValueType::kArray) return 1;
  switch (element_type_) {
    case GgufValueType::kString:
      return strings_.size();
    case GgufValueType::kArray:
      return arrays_.size();
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return floats_.size();
    case GgufValueType::kUint64:
      return uints_.size();
    default:
      return ints_.size();
  }
}

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return false;
    default:
      return true;
  }
}

bool GgufValue::is_float() const {
  return type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64;
}

absl::StatusOr<uint64_t> GgufValue::AsUint() const {
  if (!is_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an integer, found ", AbslView(GgufValueTypeName(type_))));
  }
  if (type_ == GgufValueType::kUint64) return u_;
  if (i_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a non-negative integer, found ", i_));
  }
  return static_cast<uint64_t>(i_);
}

absl::StatusOr<int64_t> GgufValue::AsInt() const {
  if (!is_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an integer, found ", AbslView(GgufValueTypeName(type_))));
  }
  if (type_ == GgufValueType::kUint64) {
    if (u_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("integer ", u_, " too large"));
    }
    return static_cast<int64_t>(u_);
  }
  return i_;
}

absl::StatusOr<double> GgufValue::AsFloat() const {
  if (is_float()) return f_;
  if (is_integer() && type_ != GgufValueType::kBool) {
    return type_ == GgufValueType::kUint64 ? static_cast<double>(u_)
                                           : static_cast<double>(i_);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected a number, found ", AbslView(GgufValueTypeName(type_))));
}

absl::StatusOr<bool> GgufValue::AsBool() const {
  if (type_ != GgufValueType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected bool, found ", AbslView(GgufValueTypeName(type_))));
  }
  return i_ != 0;
}

absl::StatusOr<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected string, found ", AbslView(GgufValueTypeName(type_))));
  }
  return std::string_view(s_);
}

GgufValue GgufValue::Uint(GgufValueType t, uint64_t v) {
  GgufValue out;
  out.type_ = t;
  if (t == GgufValueType::kUint64) {
    out.u_ = v;
  } else {
    out.i_ = static_cast<int64_t>(v);
  }
  return out;
}

GgufValue GgufValue::Int(GgufValueType t, int64_t v) {
  GgufValue out;
  out.type_ = t;
  if (t == GgufValueType::kUint64) {
    out.u_ = static_cast<uint64_t>(v);
  } else {
    out.i_ = v;
  }
  return out;
}

GgufValue GgufValue::Float(GgufValueType t, double v) {
  GgufValue out;
  out.type_ = t;
  out.f_ = v;
  return out;
}

GgufValue GgufValue::Bool(bool v) {
  GgufValue out;
  out.type_ = GgufValueType::kBool;
  out.i_ = v ? 1 : 0;
  return out;
}

GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type_ = GgufValueType::kString;
  out.s_ = std::move(v);
  return out;
}

GgufValue GgufValue::StringArray(std::vector<std::string> v) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.element_type_ = GgufValueType::kString;
  out.strings_ = std::move(v);
  return out;
}

GgufValue GgufValue::IntArray(GgufValueType elem, std::vector<int64_t> v) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.element_type_ = elem;
  if (elem == GgufValueType::kUint64) {
    out.uints_.assign(v.begin(), v.end());
  } else {
    out.ints_ = std::move(v);
  }
  return out;
}

GgufValue GgufValue::FloatArray(GgufValueType elem, std::vector<double> v) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.element_type_ = elem;
  out.floats_ = std::move(v);
  return out;
}

// ------------------------------------------------------------ mapped parts

struct GgufFile::Part {
  std::string path;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  bool mapped = false;
  uint64_t data_offset = 0;  // start of the data section

  ~Part() {
    if (mapped && base != nullptr && size > 0) {
      munmap(const_cast<uint8_t*>(base), size);
    }
  }
};

// ------------------------------------------------------------------ parser

// Reads one GGUF image with bounds checks on every step. Errors name the file.
class GgufParser {
 public:
  GgufParser(const std::string& name, const uint8_t* data, uint64_t size)
      : name_(name), data_(data), size_(size) {}

  // Parses header, metadata and tensor table into `file` (metadata only when
  // `keep_metadata`), appending tensors tagged with `split`.
  absl::Status Parse(GgufFile* file, GgufFile::Part* part, int split,
                     bool keep_metadata);

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", AbslView(what)));
  }
  absl::Status Truncated(std::string_view what) const {
    return Error(absl::StrFormat("truncated file: %s at offset %d needs more than the %d bytes present",
                                 what, pos_, size_));
  }
  template <typename T>
  absl::Status Read(T* out, std::string_view what) {
    if (size_ - pos_ < sizeof(T)) return Truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status ReadString(std::string* out, std::string_view what);
  absl::Status ReadValue(GgufValueType type, GgufValue* out, std::string_view key,
                         int depth);
  absl::Status ReadArray(GgufValue* out, std::string_view key, int depth);
  absl::Status ReadTensorInfo(GgufTensor* t, uint64_t index);
  absl::Status ValidateTensor(GgufTensor* t, uint64_t alignment,
                              uint64_t data_bytes) const;

  std::string name_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

absl::Status GgufParser::ReadString(std::string* out, std::string_view what) {
  uint64_t len = 0;
  RETURN_IF_ERROR(Read(&len, what));
  if (len > size_ - pos_) {
    return Error(absl::StrFormat("%s: string length %d exceeds the %d bytes left in the file",
                                 what, len, size_ - pos_));
  }
  out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
  pos_ += len;
  return absl::OkStatus();
}

absl::Status GgufParser::ReadValue(GgufValueType type, GgufValue* out,
                                   std::string_view key, int depth) {
  const std::string what = absl::StrCat("key '", AbslView(key), "'");
  out->type_ = type;
  switch (type) {
    case GgufValueType::kUint8: { uint8_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kInt8: { int8_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kUint16: { uint16_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kInt16: { int16_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kUint32: { uint32_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kInt32: { int32_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kUint64: { uint64_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->u_ = v; break; }
    case GgufValueType::kInt64: { int64_t v = 0; RETURN_IF_ERROR(Read(&v, what)); out->i_ = v; break; }
    case GgufValueType::kFloat32: { float v = 0; RETURN_IF_ERROR(Read(&v, what)); out->f_ = v; break; }
    case GgufValueType::kFloat64: { double v = 0; RETURN_IF_ERROR(Read(&v, what)); out->f_ = v; break; }
    case GgufValueType::kBool: {
      uint8_t v = 0;
      RETURN_IF_ERROR(Read(&v, what));
      if (v > 1) return Error(absl::StrCat(what, ": bool value ", v, " is not 0 or 1"));
      out->i_ = v;
      break;
    }
    case GgufValueType::kString:
      RETURN_IF_ERROR(ReadString(&out->s_, what));
      break;
    case GgufValueType::kArray:
      return ReadArray(out, key, depth);
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadArray(GgufValue* out, std::string_view key, int depth) {
  const std::string what = absl::StrCat("key '", AbslView(key), "'");
  if (depth >= static_cast<int>(kMaxArrayDepth)) {
    return Error(absl::StrCat(what, ": arrays nested deeper than ", kMaxArrayDepth));
  }
  uint32_t elem_raw = 0;
  uint64_t count = 0;
  RETURN_IF_ERROR(Read(&elem_raw, what));
  if (!KnownValueType(elem_raw)) {
    return Error(absl::StrCat(what, ": unknown array element type ", elem_raw));
  }
  RETURN_IF_ERROR(Read(&count, what));
  const auto elem = static_cast<GgufValueType>(elem_raw);
  out->element_type_ = elem;
  // Every element takes at least min_size bytes: bound the count by the file.
  const uint64_t min_size = ScalarSize(elem) ? ScalarSize(elem) : 8;
  if (count > (size_ - pos_) / min_size) {
    return Error(absl::StrFormat("%s: array of %d %s elements exceeds the %d bytes left in the file",
                                 what, count, GgufValueTypeName(elem), size_ - pos_));
  }
  for (uint64_t i = 0; i < count; ++i) {
    GgufValue v;
    RETURN_IF_ERROR(ReadValue(elem, &v, key, depth + 1));
    switch (elem) {
      case GgufValueType::kString: out->strings_.push_back(std::move(v.s_)); break;
      case GgufValueType::kArray: out->arrays_.push_back(std::move(v)); break;
      case GgufValueType::kFloat32:
      case GgufValueType::kFloat64: out->floats_.push_back(v.f_); break;
      case GgufValueType::kUint64: out->uints_.push_back(v.u_); break;
      default: out->ints_.push_back(v.i_); break;
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadTensorInfo(GgufTensor* t, uint64_t index) {
  const std::string what = absl::StrCat("tensor #", index);
  RETURN_IF_ERROR(ReadString(&t->name, what));
  if (t->name.empty() || t->name.size() > kMaxNameLength) {
    return Error(absl::StrCat(what, ": name length ", t->name.size(),
                              " is outside 1..", kMaxNameLength));
  }
  const std::string tw = absl::StrCat("tensor '", t->name, "'");
  uint32_t n_dims = 0;
  RETURN_IF_ERROR(Read(&n_dims, tw));
  if (n_dims < 1 || n_dims > kMaxTensorDims) {
    return Error(absl::StrCat(tw, ": n_dims ", n_dims, " is outside 1..4"));
  }
  t->n_dims = static_cast<int>(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    RETURN_IF_ERROR(Read(&ne, tw));
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(absl::StrCat(tw, ": dimension ", d, " = ", ne, " is too large"));
    }
    t->ne[d] = static_cast<int64_t>(ne);
  }
  uint32_t type = 0;
  RETURN_IF_ERROR(Read(&type, tw));
  const auto info = LookupGgmlType(type);
  if (!info) return Error(absl::StrCat(tw, ": unknown tensor type ", type));
  t->type = info->type;
  return Read(&t->offset, tw);
}

absl::Status GgufParser::ValidateTensor(GgufTensor* t, uint64_t alignment,
                                        uint64_t data_bytes) const {
  const std::string tw = absl::StrCat("tensor '", t->name, "'");
  const GgmlTypeInfo& info = TypeInfo(t->type);
  // Element count must fit in int64 without overflow.
  int64_t n = 1;
  for (int64_t ne : t->ne) {
    if (ne != 0 && n > std::numeric_limits<int64_t>::max() / ne) {
      return Error(absl::StrCat(tw, ": element count overflows"));
    }
    n *= ne;
  }
  if (t->ne[0] % info.block_size != 0) {
    return Error(absl::StrFormat("%s: row length %d is not a multiple of the %s block size %d",
                                 tw, t->ne[0], info.name, info.block_size));
  }
  const auto row = RowBytes(t->type, t->ne[0]);
  const uint64_t rows = static_cast<uint64_t>(t->ne[1] * t->ne[2] * t->ne[3]);
  if (!row || (rows != 0 && *row > std::numeric_limits<uint64_t>::max() / rows)) {
    return Error(absl::StrCat(tw, ": byte size overflows"));
  }
  t->n_bytes = *row * rows;
  if (t->offset % alignment != 0) {
    return Error(absl::StrFormat("%s: data offset %d is not a multiple of the alignment %d",
                                 tw, t->offset, alignment));
  }
  if (t->offset > data_bytes || t->n_bytes > data_bytes - t->offset) {
    return Error(absl::StrFormat(
        "%s: data [offset %d, %d bytes] extends past the end of the data section (%d bytes)",
        tw, t->offset, t->n_bytes, data_bytes));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::Parse(GgufFile* file, GgufFile::Part* part, int split,
                               bool keep_metadata) {
  uint32_t magic = 0, version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(Read(&magic, "magic"));
  if (magic != kGgufMagic) {
    return Error(absl::StrFormat("bad magic 0x%08x (not a GGUF file)", magic));
  }
  RETURN_IF_ERROR(Read(&version, "version"));
  if (version != 2 && version != 3) {
    return Error(absl::StrCat("unsupported GGUF version ", version, " (2 and 3 are supported)"));
  }
  RETURN_IF_ERROR(Read(&n_tensors, "tensor count"));
  RETURN_IF_ERROR(Read(&n_kv, "metadata count"));
  // A tensor record takes >= 8+1+4+8+4+8 bytes, a key/value >= 8+1+4+1.
  if (n_tensors > (size_ - pos_) / 33) {
    return Error(absl::StrFormat("tensor count %d is impossible for a file of %d bytes",
                                 n_tensors, size_));
  }
  if (n_kv > (size_ - pos_) / 14) {
    return Error(absl::StrFormat("metadata count %d is impossible for a file of %d bytes",
                                 n_kv, size_));
  }
  std::vector<std::pair<std::string, GgufValue>> kv;
  absl::flat_hash_map<std::string, size_t> kv_index;
  uint64_t alignment = 32;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    RETURN_IF_ERROR(ReadString(&key, absl::StrCat("metadata key #", i)));
    uint32_t type = 0;
    RETURN_IF_ERROR(Read(&type, absl::StrCat("key '", AbslView(key), "'")));
    if (!KnownValueType(type)) {
      return Error(absl::StrCat("key '", key, "': unknown value type ", type));
    }
    GgufValue value;
    RETURN_IF_ERROR(ReadValue(static_cast<GgufValueType>(type), &value, key, 0));
    if (!kv_index.emplace(key, kv.size()).second) {
      return Error(absl::StrCat("duplicate metadata key '", key, "'"));
    }
    if (key == "general.alignment") {
      auto a = value.AsUint();
      if (!a.ok() || value.type() != GgufValueType::kUint32 || !IsPowerOfTwo(*a)) {
        return Error("key 'general.alignment': must be a u32 power of two");
      }
      alignment = *a;
    }
    kv.emplace_back(std::move(key), std::move(value));
  }
  std::vector<GgufTensor> tensors(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    RETURN_IF_ERROR(ReadTensorInfo(&tensors[i], i));
  }
  const uint64_t data_offset = (pos_ + alignment - 1) / alignment * alignment;
  if (n_tensors > 0 && data_offset > size_) {
    return Truncated("padding before the data section");
  }
  const uint64_t data_bytes = data_offset <= size_ ? size_ - data_offset : 0;
  part->data_offset = data_offset;
  for (auto& t : tensors) {
    RETURN_IF_ERROR(ValidateTensor(&t, alignment, data_bytes));
    t.split = split;
    t.data = data_ + data_offset + t.offset;
    if (!file->tensor_index_.emplace(t.name, file->tensors_.size()).second) {
      return Error(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    file->tensors_.push_back(std::move(t));
  }
  if (keep_metadata) {
    file->version_ = version;
    file->alignment_ = alignment;
    file->kv_ = std::move(kv);
    file->kv_index_ = std::move(kv_index);
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------------- GgufFile

namespace {

absl::StatusOr<std::pair<const uint8_t*, uint64_t>> MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (not a GGUF file)"));
  }
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
  }
  return std::make_pair(static_cast<const uint8_t*>(p), size);
}

// "dir/name-00001-of-00003.gguf" -> ("dir/name", 3); nullopt if not that form.
std::optional<std::pair<std::string, int>> SplitPrefix(const std::string& path) {
  static constexpr std::string_view kSuffix = ".gguf";
  // "-00001-of-00003.gguf" is 20 characters.
  if (path.size() < 20 + 1) return std::nullopt;
  const std::string tail = path.substr(path.size() - 20);
  int no = 0, count = 0;
  char dot[6] = {0};
  if (std::sscanf(tail.c_str(), "-%5d-of-%5d%5s", &no, &count, dot) != 3 ||
      std::string_view(dot) != kSuffix || no != 1) {
    return std::nullopt;
  }
  return std::make_pair(path.substr(0, path.size() - 20), count);
}

}  // namespace

GgufFile::~GgufFile() = default;

uint64_t GgufFile::file_bytes() const {
  uint64_t total = 0;
  for (const auto& p : parts_) total += p->size;
  return total;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(
    const uint8_t* data, size_t size, std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  auto part = std::make_unique<Part>();
  part->path = name;
  part->base = data;
  part->size = size;
  GgufParser parser(name, data, size);
  RETURN_IF_ERROR(parser.Parse(file.get(), part.get(), 0, /*keep_metadata=*/true));
  file->parts_.push_back(std::move(part));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  {
    ASSIGN_OR_RETURN(auto mapped, MapFile(path));
    auto part = std::make_unique<Part>();
    part->path = path;
    part->base = mapped.first;
    part->size = mapped.second;
    part->mapped = true;
    file->parts_.push_back(std::move(part));
    GgufParser parser(path, mapped.first, mapped.second);
    RETURN_IF_ERROR(parser.Parse(file.get(), file->parts_[0].get(), 0, true));
  }
  ASSIGN_OR_RETURN(const uint64_t split_count, file->GetUintOr("split.count", 1));
  if (split_count <= 1) return file;
  if (split_count > 9999) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key 'split.count': ", split_count, " parts is absurd"));
  }
  const auto prefix = SplitPrefix(path);
  if (!prefix || prefix->second != static_cast<int>(split_count)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": key 'split.count' says ", split_count,
        " parts but the name is not of the form <name>-00001-of-",
        absl::StrFormat("%05d", split_count), ".gguf"));
  }
  ASSIGN_OR_RETURN(const uint64_t split_no, file->GetUintOr("split.no", 0));
  if (split_no != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key 'split.no' is ", split_no, ", expected 0 for the first part"));
  }
  for (int i = 1; i < static_cast<int>(split_count); ++i) {
    const std::string part_path =
        absl::StrFormat("%s-%05d-of-%05d.gguf", prefix->first, i + 1, split_count);
    ASSIGN_OR_RETURN(auto mapped, MapFile(part_path));
    auto part = std::make_unique<Part>();
    part->path = part_path;
    part->base = mapped.first;
    part->size = mapped.second;
    part->mapped = true;
    file->parts_.push_back(std::move(part));
    GgufFile meta;  // metadata of this part, for split.no
    GgufParser parser(part_path, mapped.first, mapped.second);
    RETURN_IF_ERROR(parser.Parse(&meta, file->parts_.back().get(), i, true));
    for (auto& t : meta.tensors_) {
      if (!file->tensor_index_.emplace(t.name, file->tensors_.size()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(part_path, ": duplicate tensor name '", t.name, "' across split parts"));
      }
      file->tensors_.push_back(std::move(t));
    }
    ASSIGN_OR_RETURN(const uint64_t no, meta.GetUintOr("split.no", i));
    if (no != static_cast<uint64_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat(part_path, ": key 'split.no' is ", no, ", expected ", i));
    }
  }
  ASSIGN_OR_RETURN(const uint64_t expected, file->GetUintOr("split.tensors.count",
                                                             file->tensors_.size()));
  if (expected != file->tensors_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": key 'split.tensors.count' says ", expected, " tensors but the ",
        split_count, " parts hold ", file->tensors_.size()));
  }
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(AbslView(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {

template <typename T>
absl::StatusOr<T> Typed(const std::string& path, std::string_view key,
                        const GgufValue* v, absl::StatusOr<T> (GgufValue::*get)() const) {
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": missing key '", AbslView(key), "'"));
  }
  auto r = (v->*get)();
  if (!r.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key '", AbslView(key), "': ", r.status().message()));
  }
  return r;
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  ASSIGN_OR_RETURN(std::string_view s,
                   Typed<std::string_view>(path_, key, Find(key), &GgufValue::AsString));
  return std::string(s);
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  return Typed<uint64_t>(path_, key, Find(key), &GgufValue::AsUint);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  return Typed<double>(path_, key, Find(key), &GgufValue::AsFloat);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  return Typed<bool>(path_, key, Find(key), &GgufValue::AsBool);
}

absl::StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing key '", AbslView(key), "'"));
  }
  if (v->type() != GgufValueType::kArray) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": key '", AbslView(key), "': expected an array, found ", AbslView(GgufValueTypeName(v->type()))));
  }
  return v;
}

absl::StatusOr<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t def) const {
  return Find(key) ? GetUint(key) : absl::StatusOr<uint64_t>(def);
}

absl::StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double def) const {
  return Find(key) ? GetFloat(key) : absl::StatusOr<double>(def);
}

absl::StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool def) const {
  return Find(key) ? GetBool(key) : absl::StatusOr<bool>(def);
}

absl::StatusOr<std::string> GgufFile::GetStringOr(std::string_view key,
                                                  std::string def) const {
  return Find(key) ? GetString(key) : absl::StatusOr<std::string>(std::move(def));
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(AbslView(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void Add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  }
  void Add(std::string_view s) {
    const uint64_t n = s.size();
    Add(&n, 8);
    Add(s.data(), s.size());
  }
  template <typename T>
  void AddPod(T v) { Add(&v, sizeof(v)); }
};

void HashValue(Fnv1a& h, const GgufValue& v) {
  h.AddPod(static_cast<uint32_t>(v.type()));
  if (v.type() == GgufValueType::kArray) {
    h.AddPod(static_cast<uint32_t>(v.element_type()));
    h.AddPod(static_cast<uint64_t>(v.size()));
    for (const auto& s : v.strings()) h.Add(s);
    for (int64_t i : v.ints()) h.AddPod(i);
    for (uint64_t u : v.uints()) h.AddPod(u);
    for (double f : v.floats()) h.AddPod(f);
    for (const auto& a : v.arrays()) HashValue(h, a);
  } else if (v.type() == GgufValueType::kString) {
    h.Add(*v.AsString());
  } else if (v.is_float()) {
    h.AddPod(*v.AsFloat());
  } else if (v.type() == GgufValueType::kUint64) {
    h.AddPod(*v.AsUint());
  } else {
    h.AddPod(*v.AsInt());
  }
}

}  // namespace

absl::StatusOr<GgufFile::FileLocation> GgufFile::Locate(const uint8_t* p) const {
  for (const auto& part : parts_) {
    if (part->base != nullptr && p >= part->base && p < part->base + part->size) {
      return FileLocation{part->path, static_cast<uint64_t>(p - part->base)};
    }
  }
  return absl::NotFoundError(absl::StrCat(path_, ": address is not inside the file's mapping"));
}

std::string GgufFile::Identity() const {
  Fnv1a h;
  for (const auto& [key, value] : kv_) {
    if (key.rfind("split.", 0) == 0) continue;  // same model however split
    h.Add(key);
    HashValue(h, value);
  }
  for (const auto& t : tensors_) {
    h.Add(t.name);
    h.AddPod(static_cast<uint32_t>(t.type));
    for (int64_t ne : t.ne) h.AddPod(ne);
    h.AddPod(t.n_bytes);
  }
  return absl::StrFormat("%016x", h.h);
}

}  // namespace moesplit
