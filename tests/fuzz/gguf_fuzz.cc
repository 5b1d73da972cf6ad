// libFuzzer target for the GGUF reader: any byte string must either parse
// into a file whose every tensor lies inside the buffer, or give an error.
// Built only with clang (-DMOESPLIT_FUZZ=ON); run by tests/fuzz/run_fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "common/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = moesplit::GgufFile::FromBuffer(data, size, "fuzz.gguf");
  if (!file.ok()) return 0;
  uint64_t sum = 0;
  for (const auto& t : (*file)->tensors()) {
    if (t.n_bytes > 0) sum += t.data[0] + t.data[t.n_bytes - 1];  // ASan checks bounds
  }
  for (const auto& [key, value] : (*file)->metadata()) {
    sum += value.size() + key.size();
    (void)value.AsString();
    (void)value.AsUint();
  }
  (void)(*file)->Identity();
  return static_cast<int>(sum & 0);
}
