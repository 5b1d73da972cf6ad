#include "common/backend/cuda/cuda_device.h"

#include <vector>

#include "gtest/gtest.h"

namespace moesplit::cuda {
namespace {

TEST(CudaDeviceTest, SaxpyMatchesTheCpu) {
  if (ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x(100000), y(100000), want(100000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.5f * i;
    y[i] = 1.0f - i;
    want[i] = 3.0f * x[i] + y[i];
  }
  ASSERT_TRUE(Saxpy(3.0f, x.data(), y.data(), static_cast<int64_t>(x.size())).ok());
  EXPECT_EQ(y, want);
}

TEST(CudaDeviceTest, NoDeviceIsUnavailableNotACrash) {
  float x = 1, y = 2;
  absl::Status s = Saxpy(1.0f, &x, &y, 1);
  if (ListDevices().empty()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  } else {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(y, 3.0f);
  }
  EXPECT_EQ(Saxpy(1.0f, &x, &y, -1).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moesplit::cuda
