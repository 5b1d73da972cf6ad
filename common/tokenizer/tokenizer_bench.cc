// Encode/decode throughput on a long text. Prints numbers; asserts nothing.
//
//   tokenizer_bench [vocab.gguf] [megabytes]
// Default vocabulary: the qwen2 fixture; default text: ~4 MB built from the
// vocabulary fixture inputs and the test-vocabulary prose.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab_spec.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void Bench(const char* name, const moesplit::Tokenizer& tok,
           const std::string& text) {
  const auto t0 = std::chrono::steady_clock::now();
  auto ids = tok.Encode(text, /*parse_special=*/false);
  const double enc = Seconds(t0);
  if (!ids.ok()) {
    std::fprintf(stderr, "encode failed: %s\n", ids.status().ToString().c_str());
    std::exit(1);
  }
  const auto t1 = std::chrono::steady_clock::now();
  auto back = tok.Decode(*ids);
  const double dec = Seconds(t1);
  const double mb = text.size() / 1e6;
  std::printf(
      "%-10s %8.2f MB -> %9zu tokens | encode %7.3f s  %6.2f MB/s  %8.0f "
      "tok/s | decode %6.3f s | round trip %s\n",
      name, mb, ids->size(), enc, mb / enc, ids->size() / enc, dec,
      back.ok() && *back == text ? "ok" : "MISMATCH");
}

// Words of random letters (some accented, some CJK), so that almost no word
// repeats: the worst case for Encode's per-call word cache.
std::string RandomWords(size_t bytes) {
  static const char* const kExtra[] = {"\xC3\xA9", "\xC3\xBC", "\xE6\x97\xA5",
                                       "\xD0\xB4", "\xF0\x9F\xA6\x99"};
  uint64_t state = 88172645463325252ull;
  const auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  std::string text;
  while (text.size() < bytes) {
    const int len = 2 + next() % 9;
    for (int i = 0; i < len; ++i) {
      const uint64_t r = next() % 40;
      if (r < 26) {
        text.push_back(static_cast<char>('a' + r));
      } else if (r < 31) {
        text += kExtra[r - 26];
      } else {
        text.push_back(static_cast<char>('0' + r % 10));
      }
    }
    text += next() % 12 == 0 ? ".\n" : " ";
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("MOESPLIT_FIXTURES_DIR");
  const std::string fixtures = env != nullptr ? env : MOESPLIT_FIXTURES_DIR;
  const std::string vocab =
      argc > 1 ? argv[1] : fixtures + "/vocab/ggml-vocab-qwen2.gguf";
  const double megabytes = argc > 2 ? std::atof(argv[2]) : 4.0;

  std::ifstream in(fixtures + "/vocab/ggml-vocab-qwen2.gguf.inp");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string unit =
      ss.str() + std::string(moesplit::TestVocabText()) + "\n";
  std::string text;
  while (text.size() < megabytes * 1e6) text += unit;

  auto gguf = moesplit::GgufFile::Open(vocab);
  if (!gguf.ok()) {
    std::fprintf(stderr, "%s\n", gguf.status().ToString().c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = moesplit::Tokenizer::FromGguf(**gguf);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::printf("loaded %s: %d tokens in %.3f s\n", vocab.c_str(),
              (*tok)->n_vocab(), Seconds(t0));
  const std::string random = RandomWords(text.size());
  std::printf("text 1: fixture inputs + prose, repeated; text 2: random words\n");
  Bench((*tok)->pre_type().c_str(), **tok, text);
  Bench((*tok)->pre_type().c_str(), **tok, random);

  auto spec = moesplit::MakeTestVocab(499);
  auto small = moesplit::Tokenizer::FromSpec(*spec);
  if (small.ok()) {
    Bench("test-499", **small, text);
    Bench("test-499", **small, random);
  }
  return 0;
}
