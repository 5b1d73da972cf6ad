// GgufWriter: writes GGUF v3 files that llama.cpp loads.
//
// Metadata and the tensor table are collected in memory; tensor data is
// produced at Write() time, tensor by tensor, by a fill callback, so a model
// of many gigabytes is streamed to disk without being held in memory.
//
// Not thread-safe; one writer per file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/gguf/gguf.h"

namespace moesplit {

class GgufWriter {
 public:
  // Fills `n_bytes` bytes of tensor data at `dst`.
  using Fill = std::function<void(uint8_t* dst, uint64_t n_bytes)>;

  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  void Set(std::string key, GgufValue value);
  void SetString(std::string key, std::string v);
  void SetU32(std::string key, uint32_t v);
  void SetI32(std::string key, int32_t v);
  void SetF32(std::string key, float v);
  void SetBool(std::string key, bool v);

  // Adds a tensor with ggml shape `ne` (innermost first, 1..4 dims).
  // InvalidArgument for a duplicate name, bad shape or a row length that is
  // not a multiple of the type's block size.
  absl::Status AddTensor(std::string name, GgmlType type,
                         std::vector<int64_t> ne, Fill fill);
  absl::Status AddTensor(std::string name, GgmlType type,
                         std::vector<int64_t> ne, std::vector<uint8_t> bytes);

  // Writes the file. On failure the partial file is removed. `progress`
  // (optional) is told the bytes of each tensor once written.
  absl::Status Write(const std::string& path,
                     const std::function<void(uint64_t bytes)>& progress = nullptr) const;
  // Bytes of all tensor data (what Write reports in total).
  uint64_t data_bytes() const;

  // The whole file as bytes (tests; small files only).
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;

 private:
  std::vector<uint8_t> Header() const;  // up to the data section

  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes;
    Fill fill;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace moesplit
