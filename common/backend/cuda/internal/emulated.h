// What the host emulation of the kernel ABI (raw_emulated.cc) shares between
// its files (delta_net_emulated.cc). Not part of the device build.
#pragma once

#include <cstdint>

namespace moesplit::cuda::raw {

// Whether [p, p + bytes) lies inside one live emulated device allocation.
bool EmulatedOnDevice(const void* p, uint64_t bytes);

}  // namespace moesplit::cuda::raw
