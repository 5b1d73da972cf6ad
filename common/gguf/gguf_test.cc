#include "common/gguf/gguf.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "common/gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit {
namespace {

using ::testing::HasSubstr;

std::string Fixtures() { return MOESPLIT_FIXTURES_DIR; }

std::filesystem::path TempDir() {
  auto dir = std::filesystem::temp_directory_path() /
             absl::StrFormat("moesplit_gguf_test_%d", getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// A small valid model: a few keys of each kind and three tensors.
GgufWriter SmallWriter() {
  GgufWriter w;
  w.SetString("general.architecture", "qwen3moe");
  w.SetU32("qwen3moe.block_count", 2);
  w.SetF32("qwen3moe.rope.freq_base", 1e6f);
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "\xc4\xa0the"}));
  w.Set("tokenizer.ggml.token_type",
        GgufValue::IntArray(GgufValueType::kInt32, {1, 1, 3}));
  w.Set("tokenizer.ggml.scores", GgufValue::FloatArray(GgufValueType::kFloat32, {0.5, -1, 2}));
  w.Set("test.u64", GgufValue::Uint(GgufValueType::kUint64, 1ull << 40));
  w.Set("test.empty", GgufValue::IntArray(GgufValueType::kUint8, {}));
  std::vector<uint8_t> f32(4 * 64);
  for (int i = 0; i < 64; ++i) {
    float v = i * 0.25f;
    std::memcpy(&f32[4 * i], &v, 4);
  }
  EXPECT_TRUE(w.AddTensor("a.weight", GgmlType::kF32, {16, 4}, f32).ok());
  EXPECT_TRUE(w.AddTensor("b.weight", GgmlType::kQ8_0, {64, 2}, std::vector<uint8_t>(4 * 34, 1)).ok());
  EXPECT_TRUE(w.AddTensor("c.weight", GgmlType::kQ4_K, {256, 1, 3},
                          [](uint8_t* dst, uint64_t n) { std::memset(dst, 7, n); }).ok());
  return w;
}

TEST(GgufTest, WriterRoundTrip) {
  auto bytes = SmallWriter().Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = GgufFile::FromBuffer(bytes->data(), bytes->size());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "qwen3moe");
  EXPECT_EQ(*f.GetUint("qwen3moe.block_count"), 2u);
  EXPECT_FLOAT_EQ(*f.GetFloat("qwen3moe.rope.freq_base"), 1e6);
  EXPECT_FALSE(*f.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*f.GetUint("test.u64"), 1ull << 40);
  auto tokens = f.GetArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_THAT((*tokens)->strings(), ::testing::ElementsAre("a", "b", "\xc4\xa0the"));
  EXPECT_THAT((*f.GetArray("tokenizer.ggml.token_type"))->ints(), ::testing::ElementsAre(1, 1, 3));
  EXPECT_THAT((*f.GetArray("tokenizer.ggml.scores"))->floats(), ::testing::ElementsAre(0.5, -1, 2));
  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensor* a = f.FindTensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->n_bytes, 256u);
  float v;
  std::memcpy(&v, a->data + 4 * 5, 4);
  EXPECT_EQ(v, 1.25f);
  const GgufTensor* c = f.FindTensor("c.weight");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->type, GgmlType::kQ4_K);
  EXPECT_EQ(c->n_rows(), 3);
  EXPECT_EQ(c->n_bytes, 3u * 144);
  EXPECT_EQ(c->data[0], 7);
  EXPECT_EQ(c->offset % 32, 0u);
  // Typed errors name the key.
  EXPECT_THAT(f.GetUint("general.architecture").status().message(),
              HasSubstr("general.architecture"));
  EXPECT_EQ(f.GetUint("missing.key").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*f.GetUintOr("missing.key", 9), 9u);
}

TEST(GgufTest, WriterRejectsBadTensors) {
  GgufWriter w;
  EXPECT_EQ(w.AddTensor("x", GgmlType::kQ4_K, {100, 2}, std::vector<uint8_t>()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.AddTensor("y", GgmlType::kF32, {2}, std::vector<uint8_t>(8)).ok());
  EXPECT_EQ(w.AddTensor("y", GgmlType::kF32, {2}, std::vector<uint8_t>(8)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("z", GgmlType::kF32, {2}, std::vector<uint8_t>(4)).code(),
            absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------ malformed input

// Byte offsets into SmallWriter()'s image, found by scanning for known bytes.
size_t FindBytes(const std::vector<uint8_t>& img, std::string_view s, size_t from = 0) {
  auto it = std::search(img.begin() + from, img.end(), s.begin(), s.end());
  return it == img.end() ? std::string::npos : it - img.begin();
}

template <typename T>
void Poke(std::vector<uint8_t>& img, size_t at, T v) {
  std::memcpy(img.data() + at, &v, sizeof(T));
}

// Offset of the record of tensor `name`'s n_dims field (just after its name).
size_t TensorRecord(const std::vector<uint8_t>& img, std::string_view name) {
  return FindBytes(img, name) + name.size();
}

struct MalformedCase {
  std::string name;
  std::function<void(std::vector<uint8_t>&)> corrupt;
  std::string expected;  // substring of the error message
};

std::vector<MalformedCase> MalformedCases() {
  return {
      {"empty", [](auto& b) { b.clear(); }, "truncated"},
      {"bad_magic", [](auto& b) { b[0] = 'X'; }, "bad magic"},
      {"version_1", [](auto& b) { Poke<uint32_t>(b, 4, 1); }, "unsupported GGUF version 1"},
      {"version_99", [](auto& b) { Poke<uint32_t>(b, 4, 99); }, "unsupported GGUF version 99"},
      {"truncated_header", [](auto& b) { b.resize(12); }, "truncated file: tensor count"},
      {"truncated_metadata", [](auto& b) { b.resize(150); }, "truncated file"},
      {"truncated_data", [](auto& b) { b.resize(b.size() - 100); }, "tensor 'c.weight': data"},
      {"absurd_tensor_count", [](auto& b) { Poke<uint64_t>(b, 8, 1ull << 60); },
       "tensor count 1152921504606846976 is impossible"},
      {"absurd_kv_count", [](auto& b) { Poke<uint64_t>(b, 16, 1ull << 61); },
       "metadata count 2305843009213693952 is impossible"},
      {"absurd_string_length",
       [](auto& b) { Poke<uint64_t>(b, FindBytes(b, "general.architecture") - 8, 1ull << 62); },
       "string length 4611686018427387904 exceeds"},
      {"absurd_array_count",
       [](auto& b) {
         size_t at = FindBytes(b, "tokenizer.ggml.tokens") + 21 + 4 + 4;
         Poke<uint64_t>(b, at, 1ull << 40);
       },
       "key 'tokenizer.ggml.tokens': array of 1099511627776 string elements exceeds"},
      {"unknown_value_type",
       [](auto& b) { Poke<uint32_t>(b, FindBytes(b, "qwen3moe.block_count") + 20, 77); },
       "key 'qwen3moe.block_count': unknown value type 77"},
      {"bad_bool",
       [](auto& b) { b[FindBytes(b, "tokenizer.ggml.add_bos_token") + 28 + 4] = 5; },
       "bool value 5"},
      {"too_many_dims", [](auto& b) { Poke<uint32_t>(b, TensorRecord(b, "a.weight"), 5); },
       "tensor 'a.weight': n_dims 5"},
      {"zero_dims", [](auto& b) { Poke<uint32_t>(b, TensorRecord(b, "a.weight"), 0); },
       "tensor 'a.weight': n_dims 0"},
      {"unknown_tensor_type",
       [](auto& b) { Poke<uint32_t>(b, TensorRecord(b, "a.weight") + 4 + 16, 31); },
       "tensor 'a.weight': unknown tensor type 31"},
      {"row_not_block_multiple",
       [](auto& b) { Poke<uint64_t>(b, TensorRecord(b, "b.weight") + 4, 48); },
       "tensor 'b.weight': row length 48 is not a multiple of the Q8_0 block size 32"},
      {"overflowing_shape",
       [](auto& b) {
         Poke<uint64_t>(b, TensorRecord(b, "a.weight") + 4, 1ull << 40);
         Poke<uint64_t>(b, TensorRecord(b, "a.weight") + 12, 1ull << 40);
       },
       "tensor 'a.weight': element count overflows"},
      {"offset_past_end",
       [](auto& b) { Poke<uint64_t>(b, TensorRecord(b, "a.weight") + 4 + 16 + 4, 1ull << 20); },
       "tensor 'a.weight': data [offset 1048576"},
      {"misaligned_offset",
       [](auto& b) { Poke<uint64_t>(b, TensorRecord(b, "a.weight") + 4 + 16 + 4, 4); },
       "tensor 'a.weight': data offset 4 is not a multiple of the alignment 32"},
      {"duplicate_tensor",
       [](auto& b) { b[FindBytes(b, "b.weight")] = 'a'; },
       "duplicate tensor name 'a.weight'"},
  };
}

TEST(GgufTest, MalformedInputGivesOnePreciseError) {
  auto base = SmallWriter().Serialize();
  ASSERT_TRUE(base.ok());
  for (const MalformedCase& c : MalformedCases()) {
    std::vector<uint8_t> img = *base;
    c.corrupt(img);
    auto file = GgufFile::FromBuffer(img.data(), img.size(), "bad.gguf");
    ASSERT_FALSE(file.ok()) << c.name;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(c.expected))
        << c.name << ": " << file.status();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr("bad.gguf")) << c.name;
  }
}

TEST(GgufTest, DuplicateKeyAndBadAlignmentAreRefused) {
  GgufWriter w;
  w.SetU32("a", 1);
  w.Set("b", GgufValue::Uint(GgufValueType::kUint32, 2));
  auto img = *w.Serialize();
  img[FindBytes(img, "b") ] = 'a';  // rename key "b" -> "a"
  auto f = GgufFile::FromBuffer(img.data(), img.size(), "dup.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("duplicate metadata key 'a'"));

  GgufWriter w2;
  w2.Set("general.alignment", GgufValue::Uint(GgufValueType::kUint32, 24));
  auto img2 = *w2.Serialize();
  auto f2 = GgufFile::FromBuffer(img2.data(), img2.size(), "align.gguf");
  ASSERT_FALSE(f2.ok());
  EXPECT_THAT(std::string(f2.status().message()), HasSubstr("general.alignment"));
}

TEST(GgufTest, EveryTruncationFailsCleanly) {
  auto base = SmallWriter().Serialize();
  ASSERT_TRUE(base.ok());
  auto whole = GgufFile::FromBuffer(base->data(), base->size());
  ASSERT_TRUE(whole.ok());
  size_t end = 0;  // the last byte any tensor needs; padding after it is optional
  for (const auto& t : (*whole)->tensors()) {
    end = std::max<size_t>(end, t.data + t.n_bytes - base->data());
  }
  for (size_t n = 0; n < end; n += 7) {
    std::vector<uint8_t> img(base->begin(), base->begin() + n);
    auto file = GgufFile::FromBuffer(img.data(), img.size(), "cut.gguf");
    EXPECT_FALSE(file.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufTest, CustomAlignmentWritesAndReads) {
  GgufWriter w(64);
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF16, {8}, std::vector<uint8_t>(16, 3)).ok());
  ASSERT_TRUE(w.AddTensor("u", GgmlType::kF16, {8}, std::vector<uint8_t>(16, 4)).ok());
  auto img = *w.Serialize();
  auto f = GgufFile::FromBuffer(img.data(), img.size());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->FindTensor("u")->offset, 64u);
  EXPECT_EQ((*f)->FindTensor("u")->data[0], 4);
}

TEST(GgufTest, OpenMissingFileIsNotFound) {
  auto f = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/nonexistent/model.gguf"));
}

TEST(GgufTest, SplitModelIsPresentedAsOne) {
  const auto dir = TempDir();
  const std::string prefix = (dir / "split").string();
  for (int i = 0; i < 3; ++i) {
    GgufWriter w;
    w.SetString("general.architecture", "qwen3moe");
    w.Set("split.no", GgufValue::Uint(GgufValueType::kUint16, i));
    w.Set("split.count", GgufValue::Uint(GgufValueType::kUint16, 3));
    w.Set("split.tensors.count", GgufValue::Int(GgufValueType::kInt32, 3));
    ASSERT_TRUE(w.AddTensor(absl::StrFormat("t%d", i), GgmlType::kF32, {4},
                            std::vector<uint8_t>(16, static_cast<uint8_t>(i + 1))).ok());
    ASSERT_TRUE(w.Write(absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, i + 1, 3)).ok());
  }
  auto f = GgufFile::Open(prefix + "-00001-of-00003.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->n_splits(), 3);
  ASSERT_EQ((*f)->tensors().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const GgufTensor* t = (*f)->FindTensor(absl::StrFormat("t%d", i));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->split, i);
    EXPECT_EQ(t->data[0], i + 1);
    // Locate names the part and the byte's offset in it: reading there from
    // the file gives the mapped bytes.
    auto loc = (*f)->Locate(t->data + 3);
    ASSERT_TRUE(loc.ok()) << loc.status();
    EXPECT_EQ(loc->path, absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, i + 1, 3));
    std::ifstream in(loc->path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(loc->offset));
    EXPECT_EQ(in.get(), i + 1);
  }
  const uint8_t outside = 0;
  EXPECT_EQ((*f)->Locate(&outside).status().code(), absl::StatusCode::kNotFound);
  // A missing part is a clear error.
  std::filesystem::remove(prefix + "-00003-of-00003.gguf");
  auto g = GgufFile::Open(prefix + "-00001-of-00003.gguf");
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("split-00003-of-00003.gguf"));
  std::filesystem::remove_all(dir);
}

TEST(GgufTest, WriteThenOpenFromDisk) {
  const auto path = (TempDir() / "small.gguf").string();
  ASSERT_TRUE(SmallWriter().Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 3u);
  EXPECT_EQ((*f)->Identity().size(), 16u);
  auto g = GgufFile::Open(path);
  EXPECT_EQ((*f)->Identity(), (*g)->Identity());
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// Every fixture model opens; tensors cover the file; identity differs.
TEST(GgufTest, OpensEveryFixtureModel) {
  int opened = 0;
  std::set<std::string> identities;
  for (const auto& e : std::filesystem::directory_iterator(Fixtures() + "/models")) {
    if (e.path().extension() != ".gguf") continue;
    auto f = GgufFile::Open(e.path().string());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_GT((*f)->tensors().size(), 0u) << e.path();
    EXPECT_TRUE((*f)->GetString("general.architecture").ok()) << e.path();
    identities.insert((*f)->Identity());
    ++opened;
  }
  EXPECT_GE(opened, 13);
  EXPECT_EQ(identities.size(), static_cast<size_t>(opened));
}

TEST(GgufTest, OpensVocabWithStringArrays) {
  auto f = GgufFile::Open(Fixtures() + "/vocab/ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  auto tokens = (*f)->GetArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_GT((*tokens)->strings().size(), 150000u);
  auto merges = (*f)->GetArray("tokenizer.ggml.merges");
  ASSERT_TRUE(merges.ok());
  EXPECT_GT((*merges)->strings().size(), 100000u);
}

}  // namespace
}  // namespace moesplit
