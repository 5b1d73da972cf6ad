#include "common/quant/quant.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant {
namespace {

constexpr int kNumTypeIds = 40;  // ggml type ids 0..39
constexpr int kNumLevels = 4;

constexpr GgmlType kSupported[] = {
    GgmlType::kF32,  GgmlType::kF16,    GgmlType::kBF16,   GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0,   GgmlType::kQ5_1,   GgmlType::kQ8_0,
    GgmlType::kQ8_1, GgmlType::kQ2_K,   GgmlType::kQ3_K,   GgmlType::kQ4_K,
    GgmlType::kQ5_K, GgmlType::kQ6_K,   GgmlType::kQ8_K,   GgmlType::kIQ4_NL,
    GgmlType::kIQ4_XS, GgmlType::kMXFP4,
    // i-quants and ternary types: decoder and dot kernels, no quantiser.
    GgmlType::kIQ1_S,  GgmlType::kIQ1_M,  GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
    GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kTQ1_0,   GgmlType::kTQ2_0,
};

// One fully resolved traits table per kernel level, so switching levels is a
// single atomic store and readers never see a half-updated entry.
struct Registry {
  std::mutex mu;  // serialises RegisterVecDot
  std::array<std::array<VecDotFn, kNumLevels>, kNumTypeIds> kernels{};
  std::array<std::array<VecDotRowsFn, kNumLevels>, kNumTypeIds> rows{};
  std::array<std::array<VecDotTokensFn, kNumLevels>, kNumTypeIds> tokens{};
  std::array<std::array<TypeTraits, kNumTypeIds>, kNumLevels> tables{};
  std::array<bool, kNumTypeIds> supported{};
  std::atomic<int> active{0};

  // Recomputes the vec_dot of `id` in every level's table. REQUIRES: mu held
  // or construction in progress.
  void Resolve(int id) {
    for (int level = 0; level < kNumLevels; ++level) {
      VecDotFn best = nullptr;
      VecDotRowsFn best_rows = nullptr;
      VecDotTokensFn best_tokens = nullptr;
      for (int l = 0; l <= level; ++l) {
        if (kernels[id][l] != nullptr) {
          best = kernels[id][l];
          best_rows = rows[id][l];
          best_tokens = tokens[id][l];
        }
      }
      tables[level][id].vec_dot = best;
      tables[level][id].vec_dot_rows = best_rows;
      tables[level][id].vec_dot_tokens = best_rows != nullptr ? best_tokens : nullptr;
    }
  }
};

Registry* BuildRegistry() {
  auto* r = new Registry;
  for (GgmlType type : kSupported) {
    const int id = static_cast<int>(type);
    r->supported[id] = true;
    TypeTraits t;
    t.type = type;
    t.dequantize = internal::ScalarDequantizer(type);
    t.quantize = internal::ReferenceQuantizer(type);
    GgmlType vdt = type;
    if (internal::VecDotTypeOf(type, &vdt)) t.vec_dot_type = vdt;
    for (auto& table : r->tables) table[id] = t;
    r->kernels[id][static_cast<int>(KernelLevel::kScalar)] = internal::ScalarVecDot(type);
    r->rows[id][static_cast<int>(KernelLevel::kScalar)] = internal::ScalarVecDotRows(type);
  }
  const internal::SimdKernels& simd = internal::CpuSimdKernels();
  for (const auto& k : simd.dots) {
    const int id = static_cast<int>(k.type);
    if (r->supported[id]) {
      r->kernels[id][static_cast<int>(k.level)] = k.fn;
      r->rows[id][static_cast<int>(k.level)] = k.rows;
      r->tokens[id][static_cast<int>(k.level)] = k.tokens;
    }
  }
  // Byte-identical SIMD quantisers replace the reference from their level up.
  for (const auto& q : simd.quantizers) {
    const int id = static_cast<int>(q.type);
    if (!r->supported[id]) continue;
    for (int level = static_cast<int>(q.level); level < kNumLevels; ++level) {
      r->tables[level][id].quantize = q.fn;
    }
  }
  const KernelLevel best = internal::CpuBestLevel();
  for (GgmlType type : kSupported) r->Resolve(static_cast<int>(type));
  r->active.store(static_cast<int>(best));
  return r;
}

Registry& GetRegistry() {
  static Registry* const registry = BuildRegistry();
  return *registry;
}

bool ValidId(GgmlType type) {
  const uint32_t id = static_cast<uint32_t>(type);
  return id < kNumTypeIds;
}

absl::Status CheckBlocks(GgmlType type, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("negative element count ", n));
  const int64_t bs = TypeInfo(type).block_size;
  if (n % bs != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(GgmlTypeName(type)), ": ", n, " elements is not a multiple of the block size ", bs));
  }
  return absl::OkStatus();
}

}  // namespace

const TypeTraits* GetTypeTraits(GgmlType type) {
  if (!ValidId(type)) return nullptr;
  Registry& r = GetRegistry();
  const int id = static_cast<int>(type);
  if (!r.supported[id]) return nullptr;
  return &r.tables[r.active.load(std::memory_order_acquire)][id];
}

absl::Status CheckSupported(GgmlType type) {
  if (GetTypeTraits(type) != nullptr) return absl::OkStatus();
  const auto info = LookupGgmlType(static_cast<uint32_t>(type));
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported tensor type ",
      info ? std::string(info->name) : absl::StrCat("#", static_cast<uint32_t>(type))));
}

bool CanDequantize(GgmlType type) { return GetTypeTraits(type) != nullptr; }

absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const TypeTraits* t = GetTypeTraits(type);
  if (t == nullptr) return CheckSupported(type);
  const DequantRowFn dequantize = t->dequantize;
  RETURN_IF_ERROR(CheckBlocks(type, n));
  if (n > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError("DequantizeRow: null buffer");
  }
  if (n > 0) dequantize(src, dst, n);
  return absl::OkStatus();
}

absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  const TypeTraits* t = GetTypeTraits(type);
  if (t == nullptr) return CheckSupported(type);
  if (t->quantize == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no quantiser for type ", std::string(GgmlTypeName(type))));
  }
  RETURN_IF_ERROR(CheckBlocks(type, n));
  if (n > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError("QuantizeRow: null buffer");
  }
  if (n > 0) t->quantize(src, dst, n);
  return absl::OkStatus();
}

void RegisterVecDot(GgmlType type, KernelLevel level, VecDotFn fn) {
  if (!ValidId(type)) return;
  const int lvl = static_cast<int>(level);
  if (lvl < 0 || lvl >= kNumLevels) return;
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int id = static_cast<int>(type);
  if (!r.supported[id]) return;
  r.kernels[id][lvl] = fn;
  r.rows[id][lvl] = nullptr;
  r.tokens[id][lvl] = nullptr;
  r.Resolve(id);
}

void SetActiveKernelLevel(KernelLevel level) {
  const int lvl = static_cast<int>(level);
  if (lvl < 0 || lvl >= kNumLevels) return;
  GetRegistry().active.store(lvl, std::memory_order_release);
}

KernelLevel ActiveKernelLevel() {
  return static_cast<KernelLevel>(GetRegistry().active.load(std::memory_order_acquire));
}

}  // namespace moesplit::quant
