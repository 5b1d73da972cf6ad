#include "common/quant/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/gemm.h"
#include "common/quant/packed.h"
#include "common/quant/quant.h"

namespace moesplit::quant {
namespace {

constexpr int64_t kRowTile = 16;  // weight rows kept hot while tokens stream
constexpr int64_t kMinTiledTokens = 5;  // from here on the tiled GEMM is faster

absl::Status ValidateMatMul(const WeightView& w, const float* x, int64_t n_tokens,
                            const float* y) {
  const TypeTraits* traits = GetTypeTraits(w.type);
  if (traits == nullptr) return CheckSupported(w.type);
  const std::string name(GgmlTypeName(w.type));
  if (traits->vec_dot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: ", name, " has no dot kernel"));
  }
  if (w.n_rows < 0 || w.n_cols < 0 || n_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatMul: negative shape rows=", w.n_rows, " cols=", w.n_cols, " tokens=", n_tokens));
  }
  const std::optional<uint64_t> need = RowBytes(w.type, w.n_cols);
  if (!need.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatMul: ", name, " row of ", w.n_cols, " elements is not whole blocks of ",
        TypeInfo(w.type).block_size));
  }
  if (w.row_bytes < *need) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: ", name, " row_bytes ",
                                                   w.row_bytes, " < ", *need));
  }
  const uint64_t align = internal::BlockAlignment(w.type);
  if (w.row_bytes % align != 0 || reinterpret_cast<uintptr_t>(w.data) % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: ", name,
                                                   " weights need ", align, "-byte alignment"));
  }
  if (w.packed && !PackedLayoutExists(w.type)) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: ", name, " has no packed layout"));
  }
  if (w.packed && (w.n_rows % kPackedStripRows != 0 || w.n_cols % PackedColumns(w.type) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: packed ", name, " weights of ", w.n_rows, "x",
                                                   w.n_cols, " are not whole 16-row strips of ",
                                                   PackedColumns(w.type), "-column superblocks"));
  }
  const bool has_work = w.n_cols > 0 && w.n_rows > 0 && n_tokens > 0;
  if (has_work && (w.data == nullptr || x == nullptr)) {
    return absl::InvalidArgumentError("MatMul: null weight or activation buffer");
  }
  if (w.n_rows > 0 && n_tokens > 0 && y == nullptr) {
    return absl::InvalidArgumentError("MatMul: null output buffer");
  }
  const std::optional<uint64_t> act = RowBytes(traits->vec_dot_type, w.n_cols);
  if (!act.has_value() ||
      (n_tokens > 0 && *act > std::numeric_limits<uint64_t>::max() / 2 / n_tokens)) {
    return absl::InvalidArgumentError("MatMul: activation buffer size overflows");
  }
  return absl::OkStatus();
}

void Parallel(ThreadPool* pool, int64_t n, int64_t min_chunk,
              const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, fn, min_chunk);
  }
}

// Rows [r0, r1) of y = W x by vec_dot, each row tile run against every
// token while it is hot.
void RowRange(const TypeTraits& traits, const WeightView& w, const uint8_t* act,
              uint64_t act_row_bytes, int64_t n_tokens, int64_t r0, int64_t r1, float* y) {
  const int64_t n_rows = w.n_rows, n_cols = w.n_cols;
  for (int64_t rt = r0; rt < r1; rt += kRowTile) {
    const int64_t nr = std::min(r1, rt + kRowTile) - rt;
    const uint8_t* wt = w.data + rt * w.row_bytes;
    if (n_tokens > 1 && traits.vec_dot_tokens != nullptr) {
      traits.vec_dot_tokens(n_cols, wt, w.row_bytes, nr, act, act_row_bytes, n_tokens, y + rt, n_rows);
      continue;
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* a = act + t * act_row_bytes;
      float* yt = y + t * n_rows + rt;
      if (traits.vec_dot_rows != nullptr) {
        traits.vec_dot_rows(n_cols, wt, w.row_bytes, nr, a, yt);
      } else {
        for (int64_t r = 0; r < nr; ++r) yt[r] = traits.vec_dot(n_cols, wt + r * w.row_bytes, a);
      }
    }
  }
}

// The least work a thread is given: 65536 multiply-adds, in units of
// `unit_rows` rows of n_cols x n_tokens (a decode step's K and V products,
// 512 x 2048, take both threads).
int64_t MinUnits(int64_t unit_rows, int64_t n_cols, int64_t n_tokens) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, unit_rows * n_cols * n_tokens));
}

// One vec_dot per (row, token): rows split over the threads.
void RowProduct(const TypeTraits& traits, const WeightView& w, const uint8_t* act, uint64_t act_row_bytes,
                int64_t n_tokens, float* y, ThreadPool* pool) {
  Parallel(pool, w.n_rows, MinUnits(1, w.n_cols, n_tokens), [&](int64_t r0, int64_t r1) {
    RowRange(traits, w, act, act_row_bytes, n_tokens, r0, r1, y);
  });
}

// 64-byte aligned, uninitialised thread-local scratch (grows, never
// shrinks): slot 0 for TileGemm, 1 for the activation tiles, 2 for the
// converted activation rows (MatMul never nests on one thread); MatMuls'
// one dispatch (no tiled GEMM) keeps up to three activation types in 0-2.
uint8_t* ThreadScratch(uint64_t bytes, int slot = 0) {
  struct Buf {
    std::unique_ptr<uint8_t[]> p;
    uint64_t size = 0;
  };
  thread_local Buf bufs[3];
  Buf& b = bufs[slot];
  if (b.size < bytes + 64) {
    b.p.reset();
    b.p.reset(new uint8_t[bytes + 64]);
    b.size = bytes + 64;
  }
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b.p.get()) + 63) & ~uintptr_t{63});
}

// The tiled GEMM (gemm.h; bit-identical to RowProduct): tokens packed into
// tiles once, blocks of kPanelRows rows split over the threads.
void TiledProduct(const WeightView& w, const uint8_t* act, GgmlType act_type, uint64_t act_row_bytes,
                  int64_t n_tokens, float* y, ThreadPool* pool) {
  std::vector<const uint8_t*> rows(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) rows[t] = act + t * act_row_bytes;
  uint8_t* tiles = ThreadScratch(ActTileBytes(w.n_cols, n_tokens), 1);
  PackActTiles(act_type, rows.data(), n_tokens, w.n_cols, tiles);
  const int64_t n_blocks = (w.n_rows + kPanelRows - 1) / kPanelRows;
  const uint64_t scratch_bytes = TileGemmScratchBytes(w.type, w.n_cols);
  Parallel(pool, n_blocks, 1, [&](int64_t b0, int64_t b1) {
    const int64_t r0 = b0 * kPanelRows, r1 = std::min(w.n_rows, b1 * kPanelRows);
    TileGemm(w, r0, r1 - r0, tiles, n_tokens, y + r0, w.n_rows, ThreadScratch(scratch_bytes));
  });
}

// Packed weights: strips split over the threads, each run against every
// token (PackedGemm keeps a strip hot while the tokens stream).
void PackedProduct(const WeightView& w, const uint8_t* act, uint64_t act_row_bytes, int64_t n_tokens,
                   float* y, ThreadPool* pool) {
  std::vector<const uint8_t*> rows(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) rows[t] = act + t * act_row_bytes;
  const PackedView pv{w.type, w.data, w.n_rows, w.n_cols};
  const int64_t n_strips = w.n_rows / kPackedStripRows;
  Parallel(pool, n_strips, MinUnits(kPackedStripRows, w.n_cols, n_tokens), [&](int64_t s0, int64_t s1) {
    const int64_t r0 = s0 * kPackedStripRows;
    PackedGemm(pv, r0, (s1 - s0) * kPackedStripRows, rows.data(), n_tokens, y + r0, w.n_rows);
  });
}

// The activation rows in `type` (f32: x itself), converted over the pool
// into scratch slot `slot`.
const uint8_t* ActivationRows(GgmlType type, const float* x, int64_t n_cols, int64_t n_tokens,
                              int slot, ThreadPool* pool) {
  if (type == GgmlType::kF32) return reinterpret_cast<const uint8_t*>(x);
  const uint64_t row_bytes = *RowBytes(type, n_cols);
  const QuantRowFn quantize = GetTypeTraits(type)->quantize;
  uint8_t* dst = ThreadScratch(row_bytes * static_cast<uint64_t>(n_tokens), slot);
  const int64_t min_tokens = std::max<int64_t>(1, 16384 / n_cols);
  Parallel(pool, n_tokens, min_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) quantize(x + t * n_cols, dst + t * row_bytes, n_cols);
  });
  return dst;
}

}  // namespace

absl::Status MatMuls(absl::Span<const Product> products, const float* x, int64_t n_tokens,
                     ThreadPool* pool) {
  for (const Product& p : products) RETURN_IF_ERROR(ValidateMatMul(p.w, x, n_tokens, p.y));
  // One dispatch when every product runs row by row or packed over one
  // shared column count, with at most three activation types (scratch
  // slots 0-2, free outside the tiled GEMM); otherwise one MatMul each.
  std::vector<GgmlType> act_types;
  bool fused = n_tokens > 0;
  for (const Product& p : products) {
    if (p.w.n_cols != products[0].w.n_cols) fused = false;
    if (!p.w.packed && n_tokens >= kMinTiledTokens && TileGemmAvailable(p.w.type)) fused = false;
    const GgmlType t = GetTypeTraits(p.w.type)->vec_dot_type;
    if (t != GgmlType::kF32 && std::find(act_types.begin(), act_types.end(), t) == act_types.end()) {
      act_types.push_back(t);
    }
  }
  if (act_types.size() > 3) fused = false;
  if (!fused || products.empty() || products[0].w.n_cols == 0) {
    for (const Product& p : products) RETURN_IF_ERROR(MatMul(p.w, x, n_tokens, p.y, pool));
    return absl::OkStatus();
  }
  const int64_t n_cols = products[0].w.n_cols;
  std::vector<const uint8_t*> acts(act_types.size());
  for (size_t i = 0; i < act_types.size(); ++i) {
    acts[i] = ActivationRows(act_types[i], x, n_cols, n_tokens, static_cast<int>(i), pool);
  }
  // Each product's rows in units of 16 (a packed strip, a row tile), numbered
  // on from the previous product's.
  struct Part {
    const TypeTraits* traits;
    const uint8_t* act;
    uint64_t act_row_bytes;
    std::vector<const uint8_t*> rows;  // packed: the activation row pointers
    int64_t first_unit, n_units;
  };
  std::vector<Part> parts;
  int64_t total = 0;
  for (const Product& p : products) {
    Part part;
    part.traits = GetTypeTraits(p.w.type);
    const GgmlType t = part.traits->vec_dot_type;
    part.act = t == GgmlType::kF32
                   ? reinterpret_cast<const uint8_t*>(x)
                   : acts[std::find(act_types.begin(), act_types.end(), t) - act_types.begin()];
    part.act_row_bytes = *RowBytes(t, n_cols);
    if (p.w.packed) {
      for (int64_t i = 0; i < n_tokens; ++i) part.rows.push_back(part.act + i * part.act_row_bytes);
    }
    part.first_unit = total;
    part.n_units = (p.w.n_rows + kRowTile - 1) / kRowTile;
    total += part.n_units;
    parts.push_back(std::move(part));
  }
  static_assert(kRowTile == kPackedStripRows, "a unit is one row tile or one packed strip");
  Parallel(pool, total, MinUnits(kRowTile, n_cols, n_tokens), [&](int64_t u0, int64_t u1) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& part = parts[i];
      const WeightView& w = products[i].w;
      const int64_t a = std::max(u0, part.first_unit), b = std::min(u1, part.first_unit + part.n_units);
      if (a >= b) continue;
      const int64_t r0 = (a - part.first_unit) * kRowTile;
      const int64_t r1 = std::min(w.n_rows, (b - part.first_unit) * kRowTile);
      if (w.packed) {
        const PackedView pv{w.type, w.data, w.n_rows, w.n_cols};
        PackedGemm(pv, r0, r1 - r0, part.rows.data(), n_tokens, products[i].y + r0, w.n_rows);
      } else {
        RowRange(*part.traits, w, part.act, part.act_row_bytes, n_tokens, r0, r1, products[i].y);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status MatMul(const WeightView& w, const float* x, int64_t n_tokens, float* y,
                    ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateMatMul(w, x, n_tokens, y));
  if (w.n_rows == 0 || n_tokens == 0) return absl::OkStatus();
  if (w.n_cols == 0) {
    std::fill(y, y + n_tokens * w.n_rows, 0.0f);
    return absl::OkStatus();
  }
  const TypeTraits* traits = GetTypeTraits(w.type);
  const GgmlType act_type = traits->vec_dot_type;
  const uint64_t act_row_bytes = *RowBytes(act_type, w.n_cols);

  // Activation rows in the weight's vec_dot_type (f32 is used in place).
  const uint8_t* act = ActivationRows(act_type, x, w.n_cols, n_tokens, 2, pool);

  if (w.packed) {
    PackedProduct(w, act, act_row_bytes, n_tokens, y, pool);
  } else if (n_tokens >= kMinTiledTokens && TileGemmAvailable(w.type)) {
    TiledProduct(w, act, act_type, act_row_bytes, n_tokens, y, pool);
  } else {
    RowProduct(*traits, w, act, act_row_bytes, n_tokens, y, pool);
  }
  return absl::OkStatus();
}

absl::Status GroupedMatMul(const WeightView& w, int64_t n_groups, const float* x, int64_t n_tokens,
                           float* y, ThreadPool* pool) {
  if (n_groups <= 0 || w.n_rows % n_groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupedMatMul: ", n_groups, " groups do not divide ", w.n_rows, " rows"));
  }
  const int64_t r = w.n_rows / n_groups, n_cols = w.n_cols;
  const uint64_t group_bytes =
      w.packed ? PackedMatrixBytes(w.type, r, n_cols) : static_cast<uint64_t>(r) * w.row_bytes;
  auto group = [&](int64_t g) {
    WeightView v = w;
    v.n_rows = r;
    v.data = w.data == nullptr ? nullptr : w.data + g * group_bytes;
    return v;
  };
  RETURN_IF_ERROR(ValidateMatMul(group(0), x, n_tokens, y));  // every group's geometry
  if (r == 0 || n_tokens == 0) return absl::OkStatus();
  if (n_cols == 0) {
    std::fill(y, y + n_groups * n_tokens * r, 0.0f);
    return absl::OkStatus();
  }
  if (r % kRowTile != 0 || (!w.packed && n_tokens >= kMinTiledTokens && TileGemmAvailable(w.type))) {
    for (int64_t g = 0; g < n_groups; ++g) {
      RETURN_IF_ERROR(MatMul(group(g), x + g * n_tokens * n_cols, n_tokens, y + g * n_tokens * r, pool));
    }
    return absl::OkStatus();
  }
  const TypeTraits* traits = GetTypeTraits(w.type);
  const GgmlType act_type = traits->vec_dot_type;
  const uint64_t act_row_bytes = *RowBytes(act_type, n_cols);
  // Every group's activation rows, group after group.
  const uint8_t* act = ActivationRows(act_type, x, n_cols, n_groups * n_tokens, 2, pool);
  std::vector<const uint8_t*> rows;
  if (w.packed) {
    for (int64_t i = 0; i < n_groups * n_tokens; ++i) rows.push_back(act + i * act_row_bytes);
  }
  const int64_t units = r / kRowTile;  // per group
  Parallel(pool, n_groups * units, MinUnits(kRowTile, n_cols, n_tokens), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1;) {
      const int64_t g = u / units, e = std::min(u1, (g + 1) * units);
      const int64_t r0 = (u - g * units) * kRowTile, r1 = (e - g * units) * kRowTile;
      const WeightView wg = group(g);
      float* yg = y + g * n_tokens * r;
      if (w.packed) {
        const PackedView pv{w.type, wg.data, r, n_cols};
        PackedGemm(pv, r0, r1 - r0, rows.data() + g * n_tokens, n_tokens, yg + r0, r);
      } else {
        RowRange(*traits, wg, act + g * n_tokens * act_row_bytes, act_row_bytes, n_tokens, r0, r1, yg);
      }
      u = e;
    }
  });
  return absl::OkStatus();
}

}  // namespace moesplit::quant
