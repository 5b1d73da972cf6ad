#include "common/base/memory_bandwidth.h"

#include <vector>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

TEST(SumWordsTest, SumsWholeWordsOfEvery128ByteBlock) {
  std::vector<uint8_t> bytes(256 + 100, 0);
  for (size_t i = 0; i < bytes.size(); i += 8) bytes[i] = 1;  // each word == 1
  // The 100-byte tail is ignored: 256 bytes = 32 words.
  EXPECT_EQ(SumWords(bytes.data(), bytes.size()), 32u);
  EXPECT_EQ(SumWords(bytes.data(), 127), 0u);
}

TEST(MeasureDramReadGbpsTest, ReturnsAPositiveRateOnEveryThreadCount) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const double gbps = MeasureDramReadGbps(&pool, 1, uint64_t{8} << 20);
    EXPECT_GT(gbps, 0.0) << threads;
  }
}

TEST(DramReaderTest, MeasuresRepeatedlyOnOneBuffer) {
  ThreadPool pool(2);
  DramReader reader(&pool, uint64_t{8} << 20);
  for (int i = 0; i < 3; ++i) EXPECT_GT(reader.MeasureGbps(2), 0.0) << i;
}

}  // namespace
}  // namespace moesplit
