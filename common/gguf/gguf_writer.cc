#include "common/gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;
constexpr uint32_t kGgufVersion = 3;

// Appends little-endian encodings to a byte vector.
class Encoder {
 public:
  explicit Encoder(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Pod(T v) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &v, sizeof(T));
  }
  void String(std::string_view s) {
    Pod<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void Scalar(GgufValueType t, const GgufValue& v);
  void Value(const GgufValue& v);

 private:
  std::vector<uint8_t>* out_;
};

void Encoder::Scalar(GgufValueType t, const GgufValue& v) {
  switch (t) {
    case GgufValueType::kUint8: Pod<uint8_t>(*v.AsInt()); break;
    case GgufValueType::kInt8: Pod<int8_t>(*v.AsInt()); break;
    case GgufValueType::kUint16: Pod<uint16_t>(*v.AsInt()); break;
    case GgufValueType::kInt16: Pod<int16_t>(*v.AsInt()); break;
    case GgufValueType::kUint32: Pod<uint32_t>(*v.AsInt()); break;
    case GgufValueType::kInt32: Pod<int32_t>(*v.AsInt()); break;
    case GgufValueType::kUint64: Pod<uint64_t>(*v.AsUint()); break;
    case GgufValueType::kInt64: Pod<int64_t>(*v.AsInt()); break;
    case GgufValueType::kFloat32: Pod<float>(static_cast<float>(*v.AsFloat())); break;
    case GgufValueType::kFloat64: Pod<double>(*v.AsFloat()); break;
    case GgufValueType::kBool: Pod<uint8_t>(*v.AsBool() ? 1 : 0); break;
    case GgufValueType::kString: String(*v.AsString()); break;
    case GgufValueType::kArray: Value(v); break;
  }
}

void Encoder::Value(const GgufValue& v) {
  if (v.type() != GgufValueType::kArray) {
    Scalar(v.type(), v);
    return;
  }
  const GgufValueType e = v.element_type();
  Pod<uint32_t>(static_cast<uint32_t>(e));
  Pod<uint64_t>(v.size());
  switch (e) {
    case GgufValueType::kString:
      for (const auto& s : v.strings()) String(s);
      break;
    case GgufValueType::kArray:
      for (const auto& a : v.arrays()) Value(a);
      break;
    case GgufValueType::kFloat32:
      for (double f : v.floats()) Pod<float>(static_cast<float>(f));
      break;
    case GgufValueType::kFloat64:
      for (double f : v.floats()) Pod<double>(f);
      break;
    case GgufValueType::kUint64:
      for (uint64_t u : v.uints()) Pod<uint64_t>(u);
      break;
    default:
      for (int64_t i : v.ints()) Scalar(e, GgufValue::Int(e, i));
      break;
  }
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

void GgufWriter::Set(std::string key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::SetString(std::string key, std::string v) {
  Set(std::move(key), GgufValue::String(std::move(v)));
}
void GgufWriter::SetU32(std::string key, uint32_t v) {
  Set(std::move(key), GgufValue::Uint(GgufValueType::kUint32, v));
}
void GgufWriter::SetI32(std::string key, int32_t v) {
  Set(std::move(key), GgufValue::Int(GgufValueType::kInt32, v));
}
void GgufWriter::SetF32(std::string key, float v) {
  Set(std::move(key), GgufValue::Float(GgufValueType::kFloat32, v));
}
void GgufWriter::SetBool(std::string key, bool v) {
  Set(std::move(key), GgufValue::Bool(v));
}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type,
                                   std::vector<int64_t> ne, Fill fill) {
  if (name.empty() || name.size() > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor name '", name, "' must be 1..63 bytes"));
  }
  for (const auto& t : tensors_) {
    if (t.name == name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", name, "'"));
    }
  }
  if (ne.empty() || ne.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", ne.size(), " dimensions, expected 1..4"));
  }
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) {
    if (ne[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': bad dimension"));
    }
    rows *= static_cast<uint64_t>(ne[i]);
  }
  const auto row = RowBytes(type, ne[0]);
  if (ne[0] <= 0 || !row) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "': row length ", ne[0], " is not a positive multiple of the ",
        AbslView(GgmlTypeName(type)), " block size ", TypeInfo(type).block_size));
  }
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), *row * rows, std::move(fill)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type,
                                   std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const std::string n = name;
  RETURN_IF_ERROR(AddTensor(std::move(name), type, std::move(ne),
                            [shared](uint8_t* dst, uint64_t n_bytes) {
                              std::memcpy(dst, shared->data(), n_bytes);
                            }));
  if (tensors_.back().n_bytes != shared->size()) {
    const uint64_t want = tensors_.back().n_bytes;
    tensors_.pop_back();
    return absl::InvalidArgumentError(absl::StrCat("tensor '", n, "': ", shared->size(),
                                                   " bytes given, shape needs ", want));
  }
  return absl::OkStatus();
}

std::vector<uint8_t> GgufWriter::Header() const {
  std::vector<uint8_t> out;
  Encoder enc(&out);
  enc.Pod<uint32_t>(kGgufMagic);
  enc.Pod<uint32_t>(kGgufVersion);
  enc.Pod<uint64_t>(tensors_.size());
  const bool has_alignment = alignment_ != 32;
  enc.Pod<uint64_t>(kv_.size() + (has_alignment ? 1 : 0));
  if (has_alignment) {
    enc.String("general.alignment");
    enc.Pod<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint32));
    enc.Pod<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  for (const auto& [key, value] : kv_) {
    enc.String(key);
    enc.Pod<uint32_t>(static_cast<uint32_t>(value.type()));
    enc.Value(value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    enc.String(t.name);
    enc.Pod<uint32_t>(t.ne.size());
    for (int64_t d : t.ne) enc.Pod<uint64_t>(d);
    enc.Pod<uint32_t>(static_cast<uint32_t>(t.type));
    enc.Pod<uint64_t>(offset);
    offset = AlignUp(offset + t.n_bytes, alignment_);
  }
  out.resize(AlignUp(out.size(), alignment_), 0);
  return out;
}

uint64_t GgufWriter::data_bytes() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors_) n += AlignUp(t.n_bytes, alignment_);
  return n;
}

absl::Status GgufWriter::Write(const std::string& path,
                               const std::function<void(uint64_t bytes)>& progress) const {
  const std::vector<uint8_t> header = Header();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  auto fail = [&](std::string_view what) {
    f.reset();
    std::remove(path.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(path, ": write failed (", AbslView(what), ")"));
  };
  if (std::fwrite(header.data(), 1, header.size(), f.get()) != header.size()) {
    return fail("header");
  }
  std::vector<uint8_t> buf;
  for (const Tensor& t : tensors_) {
    const uint64_t padded = AlignUp(t.n_bytes, alignment_);
    buf.assign(padded, 0);
    t.fill(buf.data(), t.n_bytes);
    if (std::fwrite(buf.data(), 1, padded, f.get()) != padded) return fail(t.name);
    if (progress) progress(padded);
  }
  if (std::fflush(f.get()) != 0) return fail("flush");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  std::vector<uint8_t> out = Header();
  for (const Tensor& t : tensors_) {
    const size_t at = out.size();
    out.resize(at + AlignUp(t.n_bytes, alignment_), 0);
    t.fill(out.data() + at, t.n_bytes);
  }
  return out;
}

}  // namespace moesplit
