// FileTypeMix: which ggml type each tensor of a model gets for a file type
// such as Q4_K_M, following llama.cpp's llama-quantize (src/llama-quant.cpp,
// llama_tensor_get_type_impl, without an importance matrix).
//
// Rules reproduced (n_layer = block count, i = the tensor's layer,
// more_bits(i) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2):
//   - only weights of >= 2 dims are quantised; *_norm.weight, ffn_gate_inp
//     (routers), biases and 1-D tensors stay F32;
//   - output.weight: Q8_0 for MXFP4_MOE or when its rows are not a multiple
//     of the block, else Q6_K unless the base type is Q8_0;
//   - token_embd.weight: the base type (the file always has an untied
//     output.weight);
//   - attn_v: Q2_K -> Q4_K (GQA >= 4) / Q3_K; Q3_K_M -> Q5_K for i < 2 else
//     Q4_K; Q3_K_L -> Q5_K; IQ4_NL/IQ4_XS with GQA >= 4 -> Q5_K;
//     Q4_K_M/Q5_K_M -> Q6_K where more_bits(i); Q4_K_S -> Q5_K for i < 4;
//     then, with exactly 8 experts, Q8_0;
//   - attn_k: Q8_0 with exactly 8 experts;
//   - ffn_down (also *_exps and *_shexp): Q2_K -> Q3_K; Q3_K_M -> Q5_K for
//     i < n/16 else Q4_K; Q3_K_L -> Q5_K; Q4_K_M/Q5_K_M -> Q6_K where
//     more_bits(i); IQ4_NL/IQ4_XS -> Q5_K for i < n/8; Q4_K_S -> Q5_K for
//     i < n/8;
//   - attn_output: with exactly 8 experts, Q5_K for Q2_K, Q3_K_S, Q3_K_M,
//     IQ4_NL, Q4_K_S, Q4_K_M, IQ4_XS; otherwise Q2_K -> Q3_K, Q3_K_M -> Q4_K,
//     Q3_K_L -> Q5_K;
//   - MXFP4_MOE: expert tensors (3-D) MXFP4, every other weight Q8_0;
//   - a type whose block does not divide the row falls back as llama.cpp
//     does (Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, Q2_K/Q3_K->Q4_0,
//     IQ4_XS->IQ4_NL), then to F16.
//   - the i-quant file types (with the importance matrix llama-quantize
//     requires for their IQ1/IQ2/IQ3_XXS tensors): base types IQ1_S, IQ1_M,
//     IQ2_XXS, IQ2_XS, IQ2_XS (IQ2_S), IQ2_S (IQ2_M), IQ3_XXS, IQ3_S (IQ3_XS,
//     IQ3_S, IQ3_M), TQ1_0, TQ2_0; output.weight Q5_K for IQ1_*, IQ2_* and
//     IQ3_XXS; token_embd Q2_K for IQ1_*/IQ2_XXS/IQ2_XS, IQ3_S for
//     IQ2_S/IQ2_M/IQ3_XXS, Q4_K for TQ*; for IQ1_*/IQ2_* (their own branch):
//     attn_v Q4_K (GQA >= 4 or >= 4 experts) else IQ3_S (IQ2_S/M) / Q2_K,
//     attn_k Q4_K with 8 experts, ffn_down IQ3_S (IQ2_S/M) / Q2_K for
//     i < n/8, attn_output Q5_K with 8 experts else IQ2_XXS (IQ1_*) / IQ3_S
//     (IQ2_S/M); IQ3_XXS: attn_v Q4_K with GQA >= 4, attn_k and attn_q
//     IQ2_S, attn_output IQ3_S; IQ3_XS: attn_k/attn_q IQ3_XXS, ffn_gate/up
//     IQ3_XXS for n/8 <= i < 7n/8, attn_v Q4_K with GQA >= 4 (IQ3_S too);
//     IQ3_M: attn_v Q4_K, ffn_down Q4_K for i < n/8 (or more_bits(i) with 8
//     experts), attn_output Q4_K; with 8 experts attn_output Q5_K for
//     IQ3_XS/IQ3_XXS/IQ3_S/IQ3_M as for the K-quants; i-quants whose block
//     does not divide the row fall back to IQ4_NL, TQ* to Q4_0;
//   - UD-IQ1_S (not a llama.cpp file type: a mix like unsloth's dynamic
//     UD-IQ1_S files, general.file_type IQ1_S as theirs): routed experts
//     (3-D *_exps) IQ1_S for gate/up, ffn_down_exps IQ2_XXS in the first and last
//     eighth of the layers and IQ1_M between; attention Q4_K, with attn_v,
//     attn_kv_b and attn_v_b Q6_K; every other weight (dense and shared FFN,
//     token_embd) Q4_K; output.weight Q8_0;
// The rules apply to every llama.cpp file type accepted here (Q4_0, Q8_0 and
// Q6_K included: with 8 experts their attn_k/attn_v become Q8_0, and the
// output gets Q6_K). The "pure" names Q3_K, Q4_K and Q5_K (not llama.cpp file
// types) give every weight that one type, as `llama-quantize --pure` does.
// F32/F16/BF16 files keep norms and routers in F32 and everything else in
// the named type, like convert_hf_to_gguf.py.
//
// Thread-safe: pure functions over immutable tables.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/types.h"

namespace moesplit::cli {

enum class MixKind {
  kFloat,     // F32 / F16 / BF16: no llama-quantize rules
  kPure,      // one base type (with the output.weight rule)
  kLlamaMix,  // llama.cpp's per-tensor rules for this ftype
  kMxfp4Moe,
  kUdIq1S,    // UD-IQ1_S-like (below): not a llama.cpp file type
};

struct FileTypeMix {
  absl::string_view name;   // as accepted on the command line, "Q4_K_M"
  uint32_t llama_ftype;    // general.file_type (llama_ftype enum value)
  GgmlType base;           // the type most weights get
  MixKind kind;
};

// Case-insensitive lookup; InvalidArgument listing the accepted names.
absl::StatusOr<FileTypeMix> LookupFileTypeMix(absl::string_view name);
// The name of a general.file_type value ("Q4_K_M"), or "ftype <n>".
std::string FileTypeName(uint32_t llama_ftype);
// Every accepted name, for usage text.
std::vector<absl::string_view> FileTypeMixNames();

// What the type selection needs to know about one tensor.
struct TensorTypeQuery {
  absl::string_view name;  // GGUF tensor name, e.g. "blk.3.ffn_down_exps.weight"
  int n_dims = 2;
  int64_t ne0 = 0;        // row length (elements)
  int n_layer = 1;
  int n_expert = 1;
  int n_gqa = 1;          // n_head / n_head_kv
};

// The ggml type llama-quantize would give the tensor.
GgmlType PickTensorType(const FileTypeMix& mix, const TensorTypeQuery& q);

}  // namespace moesplit::cli
