// Dequantisers against llama.cpp's own outputs (gguf-py dequantisation of
// llama.cpp-quantised tensors): every value within 1e-6 * max(1, |ref|); the
// i-quant / ternary fixtures (formats-iq, dequant_reference-iq) bit for bit.

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/gguf/gguf.h"
#include "common/quant/internal/test_util.h"
#include "common/quant/quant.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moesplit::quant {
namespace {

using testing::FixturePath;
using testing::ReadF32File;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json();
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

struct Mismatch {
  int64_t count = 0;
  int64_t first = -1;
  float got = 0, want = 0;
};

Mismatch Compare(const std::vector<float>& got, const std::vector<float>& want) {
  Mismatch m;
  for (size_t i = 0; i < want.size(); ++i) {
    const float tol = 1e-6f * std::max(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (m.count++ == 0) {
        m.first = static_cast<int64_t>(i);
        m.got = got[i];
        m.want = want[i];
      }
    }
  }
  return m;
}

// Values whose float32 bits differ (so -0.0 != 0.0 and NaN == the same NaN).
Mismatch CompareBits(const std::vector<float>& got, const std::vector<float>& want) {
  Mismatch m;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (m.count++ == 0) {
        m.first = static_cast<int64_t>(i);
        m.got = got[i];
        m.want = want[i];
      }
    }
  }
  return m;
}

// Dequantises the first n values of `t` and compares them with `want`:
// within 1e-6 relative, or bit for bit.
void ExpectTensor(const GgufTensor& t, const std::string& type_name,
                  const std::vector<float>& want, const std::string& what, bool bits) {
  ASSERT_EQ(std::string(GgmlTypeName(t.type)), type_name) << what;
  const int64_t n = static_cast<int64_t>(want.size());
  ASSERT_GT(n, 0) << what << ": empty reference";
  ASSERT_LE(n, t.n_elements()) << what;
  std::vector<float> got(n);
  const absl::Status s = DequantizeRow(t.type, t.data, got.data(), n);
  ASSERT_TRUE(s.ok()) << what << " " << type_name << ": " << s;
  const Mismatch m = bits ? CompareBits(got, want) : Compare(got, want);
  EXPECT_EQ(m.count, 0) << what << " (" << type_name << "): " << m.count << " of " << n
                        << (bits ? " values differ in their bits" : " values differ")
                        << "; first at " << m.first << ": got " << m.got << " want " << m.want;
}
void ExpectTensorMatches(const GgufTensor& t, const std::string& type_name,
                         const std::vector<float>& want, const std::string& what) {
  ExpectTensor(t, type_name, want, what, /*bits=*/false);
}
void ExpectTensorBitExact(const GgufTensor& t, const std::string& type_name,
                          const std::vector<float>& want, const std::string& what) {
  ExpectTensor(t, type_name, want, what, /*bits=*/true);
}

// The nine i-quant / ternary formats llama.cpp decodes that moesplit only
// dequantises (no dot kernels yet).
const std::set<std::string>& IqTypeNames() {
  static const std::set<std::string> kNames = {"IQ1_S",   "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S",
                                               "IQ3_XXS", "IQ3_S", "TQ1_0",   "TQ2_0"};
  return kNames;
}

TEST(QuantFixtureTest, FormatsGgufMatchesGgufPy) {
  const nlohmann::json index = ReadJson(FixturePath("models/formats.json"));
  ASSERT_TRUE(index.is_object()) << "cannot read formats.json";
  auto file = GgufFile::Open(FixturePath("models/formats.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  int checked = 0;
  for (const auto& [name, entry] : index.items()) {
    const std::string type = entry.at("type").get<std::string>();
    const GgufTensor* t = (*file)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name << " (" << type << ") missing from formats.gguf";
    const auto want = ReadF32File(FixturePath("models/" + entry.at("reference").get<std::string>()));
    ASSERT_EQ(static_cast<int64_t>(want.size()), t->n_elements()) << name << " (" << type << ")";
    ExpectTensorMatches(*t, type, want, name);
    ++checked;
  }
  EXPECT_EQ(checked, 16);
}

// Every tensor a dequant_reference*.json lists (the first n_values values of
// named tensors of the fixture models) against gguf-py's values; calls
// on_type with each tensor's type; returns how many were checked.
int CheckDequantReference(const std::string& index_file, bool bits,
                          const std::function<void(const std::string&)>& on_type = nullptr) {
  const nlohmann::json index = ReadJson(FixturePath("models/" + index_file));
  EXPECT_TRUE(index.is_object()) << "cannot read " << index_file;
  if (!index.is_object()) return 0;
  int checked = 0;
  for (const auto& [model, tensors] : index.items()) {
    auto file = GgufFile::Open(FixturePath("models/" + model + ".gguf"));
    EXPECT_TRUE(file.ok()) << model << ": " << file.status();
    if (!file.ok()) continue;
    for (const auto& [name, entry] : tensors.items()) {
      const std::string type = entry.at("type").get<std::string>();
      const std::string what = model + "/" + name;
      const GgufTensor* t = (*file)->FindTensor(name);
      EXPECT_NE(t, nullptr) << what << " (" << type << ") missing";
      if (t == nullptr) continue;
      auto want = ReadF32File(FixturePath("models/" + entry.at("file").get<std::string>()));
      const int64_t n_values = entry.at("n_values").get<int64_t>();
      EXPECT_GE(static_cast<int64_t>(want.size()), n_values) << what;
      want.resize(n_values);
      ExpectTensor(*t, type, want, what, bits);
      if (on_type) on_type(type);
      ++checked;
    }
  }
  return checked;
}

TEST(QuantFixtureTest, DequantReferenceMatchesGgufPy) {
  EXPECT_EQ(CheckDequantReference("dequant_reference.json", /*bits=*/false), 60);
}

// formats-iq.gguf: per type, 64 rows of a llama.cpp-quantised tensor and 64
// synthetic blocks (`<type>.codes.weight`) whose grid indices run through the
// whole codebook with every sub-block scale, both IQ1 delta signs and
// subnormal f16 scales, so every table entry and bit field is exercised.
TEST(QuantFixtureTest, FormatsIqGgufBitExact) {
  const nlohmann::json index = ReadJson(FixturePath("models/formats-iq.json"));
  ASSERT_TRUE(index.is_object()) << "cannot read formats-iq.json";
  auto file = GgufFile::Open(FixturePath("models/formats-iq.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::set<std::string> real, codes;
  for (const auto& [name, entry] : index.items()) {
    const std::string type = entry.at("type").get<std::string>();
    EXPECT_TRUE(IqTypeNames().count(type)) << name << ": unexpected type " << type;
    const GgufTensor* t = (*file)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name << " (" << type << ") missing from formats-iq.gguf";
    const auto want = ReadF32File(FixturePath("models/" + entry.at("reference").get<std::string>()));
    ASSERT_EQ(static_cast<int64_t>(want.size()), t->n_elements()) << name << " (" << type << ")";
    ExpectTensorBitExact(*t, type, want, name);
    (name.find(".codes.") != std::string::npos ? codes : real).insert(type);
  }
  EXPECT_EQ(real, IqTypeNames());
  EXPECT_EQ(codes, IqTypeNames());
}

// The i-quant models' dequant_reference-iq.json: six tensors of each of the
// seven qwen3moe-tiny-iq* mixes (their i-quant tensors and the K-quant / Q8_0
// tensors beside them), first 16384 values, bit for bit.
TEST(QuantFixtureTest, DequantReferenceIqBitExact) {
  std::set<std::string> iq_types;
  const int checked = CheckDequantReference("dequant_reference-iq.json", /*bits=*/true,
                                            [&](const std::string& type) {
                                              if (IqTypeNames().count(type)) iq_types.insert(type);
                                            });
  EXPECT_EQ(checked, 42);
  // TQ1_0 / TQ2_0 have no model here (formats-iq covers them).
  EXPECT_EQ(iq_types, (std::set<std::string>{"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S",
                                             "IQ3_XXS", "IQ3_S"}));
}

}  // namespace
}  // namespace moesplit::quant
