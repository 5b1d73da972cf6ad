#include "common/sampling/internal/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::sampling_internal {
namespace {

using ::testing::ElementsAreArray;

CandidateSet MakeSet(const std::vector<float>& logits) {
  CandidateSet set;
  for (size_t i = 0; i < logits.size(); ++i) {
    set.data.push_back({static_cast<int32_t>(i), logits[i]});
  }
  set.size = logits.size();
  return set;
}

std::vector<int32_t> Ids(const CandidateSet& set) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < set.size; ++i) ids.push_back(set.data[i].id);
  return ids;
}

// Deterministic pseudo-random logits in [lo, hi) (splitmix64).
std::vector<float> RandomLogits(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> out(n);
  uint64_t x = seed;
  for (float& v : out) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v = lo + (hi - lo) * static_cast<float>((z >> 40) * 0x1.0p-24);
  }
  return out;
}

// Reference top-p: full canonical sort, shortest prefix with mass >= p.
std::vector<int32_t> ReferenceTopP(const std::vector<float>& logits, float p) {
  CandidateSet set = MakeSet(logits);
  std::sort(set.data.begin(), set.data.end(), Precedes);
  const float m = set.data[0].logit;
  double total = 0;
  for (const Candidate& c : set.data) total += std::exp(c.logit - m);
  double cum = 0;
  std::vector<int32_t> ids;
  for (const Candidate& c : set.data) {
    ids.push_back(c.id);
    cum += std::exp(c.logit - m);
    if (cum >= p * total) break;
  }
  return ids;
}

// Probabilities 0.15, 0.5, 0.05, 0.3 for ids 0..3.
std::vector<float> FourTokens() {
  return {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
}

TEST(TopKTest, KeepsExactlyTheBestK) {
  struct Case {
    std::vector<float> logits;
    int32_t k;
    std::vector<int32_t> want;  // in order
  };
  const Case cases[] = {
      {{1, 3, 3, 2, 0.5f}, 2, {1, 2}},
      {{1, 3, 3, 2, 0.5f}, 3, {1, 2, 3}},
      {{1, 3, 3, 2, 0.5f}, 1, {1}},
      {{1, 1, 1, 1}, 2, {0, 1}},  // ties at the cut: lowest ids
      {{0, 5, -1}, 0, {0, 1, 2}},  // disabled: untouched, id order
      {{0, 5, -1}, 3, {0, 1, 2}},  // k >= size: untouched
      {{0, 5, -1}, 99, {0, 1, 2}},
      {{-INFINITY, 2, -INFINITY, 1}, 3, {1, 3, 0}},
  };
  for (const Case& c : cases) {
    CandidateSet set = MakeSet(c.logits);
    TopK(set, c.k);
    EXPECT_THAT(Ids(set), ElementsAreArray(c.want)) << "k=" << c.k;
  }
}

TEST(TopKTest, LargeVocabularyMatchesFullSort) {
  const std::vector<float> logits = RandomLogits(20000, 7, -10, 10);
  CandidateSet ref = MakeSet(logits);
  std::sort(ref.data.begin(), ref.data.end(), Precedes);
  for (int32_t k : {1, 40, 1000}) {
    CandidateSet set = MakeSet(logits);
    TopK(set, k);
    ASSERT_EQ(set.size, static_cast<size_t>(k));
    EXPECT_TRUE(set.sorted);
    for (int32_t i = 0; i < k; ++i) {
      ASSERT_EQ(set.data[i].id, ref.data[i].id) << "k=" << k << " i=" << i;
    }
  }
}

TEST(TopPTest, KeepsShortestPrefixReachingP) {
  struct Case {
    float p;
    std::vector<int32_t> want;
  };
  const Case cases[] = {
      {0.4f, {1}},           {0.75f, {1, 3}},          {0.85f, {1, 3, 0}},
      {0.99f, {1, 3, 0, 2}}, {1.0f, {0, 1, 2, 3}},  // disabled: id order
  };
  for (const Case& c : cases) {
    CandidateSet set = MakeSet(FourTokens());
    TopP(set, c.p);
    EXPECT_THAT(Ids(set), ElementsAreArray(c.want)) << "p=" << c.p;
  }
}

TEST(TopPTest, RenormalisesOverAnEarlierTopK) {
  // After top_k = 2 the masses are 0.5/0.8 and 0.3/0.8 = 0.625, 0.375.
  CandidateSet set = MakeSet(FourTokens());
  TopK(set, 2);
  TopP(set, 0.6f);
  EXPECT_THAT(Ids(set), ElementsAreArray({1}));
  set = MakeSet(FourTokens());
  TopP(set, 0.6f);  // without top_k 0.5 < 0.6, so two tokens stay
  EXPECT_THAT(Ids(set), ElementsAreArray({1, 3}));
}

TEST(TopPTest, LargeVocabularyMatchesFullSort) {
  struct Case {
    float lo, hi;
    float p;
  };
  // Flat logits force several progressive blocks; wide ones stop early.
  const Case cases[] = {{-1, 1, 0.5f},   {-1, 1, 0.95f},  {-10, 10, 0.5f},
                        {-10, 10, 0.9f}, {-30, 30, 0.1f}, {-3, 3, 0.999f}};
  for (const Case& c : cases) {
    const std::vector<float> logits = RandomLogits(30000, 11, c.lo, c.hi);
    CandidateSet set = MakeSet(logits);
    TopP(set, c.p);
    const std::vector<int32_t> want = ReferenceTopP(logits, c.p);
    EXPECT_TRUE(set.sorted);
    EXPECT_THAT(Ids(set), ElementsAreArray(want))
        << "range [" << c.lo << ", " << c.hi << ") p=" << c.p;
  }
}

TEST(MinPTest, KeepsTokensAboveFractionOfMax) {
  struct Case {
    float p;
    std::vector<int32_t> want;
  };
  const Case cases[] = {
      {0.5f, {1, 3}},          // prob >= 0.25
      {0.2f, {0, 1, 3}},       // prob >= 0.1
      {0.05f, {0, 1, 2, 3}},   // prob >= 0.025
      {1.0f, {1}},             // only the max
      {0.0f, {0, 1, 2, 3}},    // disabled
  };
  for (const Case& c : cases) {
    CandidateSet set = MakeSet(FourTokens());
    MinP(set, c.p);
    EXPECT_THAT(Ids(set), ElementsAreArray(c.want)) << "p=" << c.p;
    // Same set on a sorted input (partition_point path), canonical order.
    CandidateSet sorted = MakeSet(FourTokens());
    std::sort(sorted.data.begin(), sorted.data.end(), Precedes);
    sorted.sorted = true;
    MinP(sorted, c.p);
    std::vector<int32_t> want_sorted;
    for (int32_t id : {1, 3, 0, 2}) {
      if (std::find(c.want.begin(), c.want.end(), id) != c.want.end()) {
        want_sorted.push_back(id);
      }
    }
    EXPECT_THAT(Ids(sorted), ElementsAreArray(want_sorted)) << "p=" << c.p;
  }
}

TEST(ArgMaxTest, TiesGoToLowestId) {
  EXPECT_EQ(ArgMax(MakeSet({1, 4, 2, 4, 4})), 1u);
  EXPECT_EQ(ArgMax(MakeSet({-INFINITY, -1, -1})), 1u);
  EXPECT_EQ(MaxLogit(MakeSet({-3, -1, -2})), -1.0f);
}

TEST(FiltersTest, TopNSigmaKeepsLogitsWithinNDeviationsOfTheMax) {
  // mean 3.2, population sigma sqrt(12.56) = 3.544.
  const std::vector<float> logits = {0, 1, 2, 3, 10};
  const std::pair<float, std::vector<int32_t>> cases[] = {
      {1.0f, {4}}, {2.0f, {3, 4}}, {3.0f, {0, 1, 2, 3, 4}}, {0.0f, {0, 1, 2, 3, 4}},
      {-1.0f, {0, 1, 2, 3, 4}}};
  for (const auto& [n, want] : cases) {
    CandidateSet set = MakeSet(logits);
    TopNSigma(set, n);
    EXPECT_THAT(Ids(set), ElementsAreArray(want)) << "n=" << n;
  }
  // -inf logits count for neither the mean nor sigma, and never survive.
  CandidateSet set = MakeSet({0, 1, 2, 3, 10, -INFINITY});
  TopNSigma(set, 2.0f);
  EXPECT_THAT(Ids(set), ElementsAreArray({3, 4}));
}

TEST(FiltersTest, TypicalKeepsTheTokensClosestToTheEntropy) {
  // H = 1.1422 nats; |-log p - H|: id 3 0.062, id 1 0.449, id 0 0.755,
  // id 2 1.853: the typical order is 3, 1, 0, 2 (masses .3, .5, .15, .05).
  const std::pair<float, std::vector<int32_t>> cases[] = {
      {0.2f, {3}}, {0.5f, {1, 3}}, {0.9f, {1, 3, 0}}, {0.99f, {1, 3, 0, 2}},
      {0.0f, {3}}, {1.0f, {0, 1, 2, 3}}};
  for (const auto& [p, want] : cases) {
    CandidateSet set = MakeSet(FourTokens());
    Typical(set, p);
    EXPECT_THAT(Ids(set), ElementsAreArray(want)) << "p=" << p;
  }
}

TEST(FiltersTest, XtcRemovesEveryTopChoiceButTheLeastProbable) {
  const std::pair<float, std::vector<int32_t>> cases[] = {
      {0.1f, {0, 2}},         // 1, 3, 0 pass: 1 and 3 go
      {0.2f, {3, 0, 2}},      // 1, 3 pass: 1 goes
      {0.4f, {0, 1, 2, 3}},   // only 1 passes: nothing goes
      {0.51f, {0, 1, 2, 3}},  // > 0.5: off
      {0.0f, {2}},            // every token passes: the least probable stays
  };
  for (const auto& [threshold, want] : cases) {
    CandidateSet set = MakeSet(FourTokens());
    Xtc(set, threshold);
    EXPECT_THAT(Ids(set), ElementsAreArray(want)) << "threshold=" << threshold;
  }
  // A banned (-inf) token is not a top choice that stays.
  std::vector<float> logits = FourTokens();
  logits.push_back(-INFINITY);
  CandidateSet set = MakeSet(logits);
  Xtc(set, 0.0f);
  EXPECT_THAT(Ids(set), ElementsAreArray({2, 4}));
}

}  // namespace
}  // namespace moesplit::sampling_internal
