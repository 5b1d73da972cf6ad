// What this build is: the project version (CMake's project(VERSION)), the
// `git describe` of the source tree when CMake configured it ("" when git or
// the repository was not there: the build never depends on git), the build
// type and whether the CUDA backend is built. Printed by every binary's
// --version and exported as the moesplit_build_info gauge
// (telemetry::ExportBuildInfo).
//
// Thread-safe: constants.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace moesplit {

struct BuildInfo {
  std::string version;     // "0.1.0"
  std::string revision;    // "v0.1.0-12-gabcdef0", or "" when unknown
  std::string build_type;  // "RelWithDebInfo"
  bool cuda = false;       // the CUDA backend is compiled in
};

const BuildInfo& GetBuildInfo();

// "<program> 0.1.0 (git v0.1.0-12-gabcdef0, RelWithDebInfo, CUDA)", one line
// without a newline.
std::string VersionLine(absl::string_view program);

}  // namespace moesplit
