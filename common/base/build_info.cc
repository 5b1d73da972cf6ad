#include "common/base/build_info.h"

#include "absl/strings/str_cat.h"

#ifndef MOESPLIT_VERSION
#define MOESPLIT_VERSION "unknown"
#endif
#ifndef MOESPLIT_REVISION
#define MOESPLIT_REVISION ""
#endif
#ifndef MOESPLIT_BUILD_TYPE
#define MOESPLIT_BUILD_TYPE ""
#endif
#ifndef MOESPLIT_CUDA_BUILT
#define MOESPLIT_CUDA_BUILT 0
#endif

namespace moesplit {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{MOESPLIT_VERSION, MOESPLIT_REVISION, MOESPLIT_BUILD_TYPE,
                              MOESPLIT_CUDA_BUILT != 0};
  return info;
}

std::string VersionLine(absl::string_view program) {
  const BuildInfo& b = GetBuildInfo();
  std::string details;
  if (!b.revision.empty()) absl::StrAppend(&details, "git ", b.revision);
  if (!b.build_type.empty()) absl::StrAppend(&details, details.empty() ? "" : ", ", b.build_type);
  absl::StrAppend(&details, details.empty() ? "" : ", ", b.cuda ? "CUDA" : "CPU only");
  return absl::StrCat(program, " ", b.version, " (", details, ")");
}

}  // namespace moesplit
