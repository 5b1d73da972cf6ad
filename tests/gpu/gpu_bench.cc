// gpu_bench: speed of the CUDA dense forward (attention, norms, routers and
// the head on the GPU; routed experts on the CPU through InProcessExperts).
//
//   gpu_bench --model PATH [--generate [--preset NAME] [--layers N]]
//             [--gpu-memory 8GiB] [--ctx 65536] [--kv-type q8_0] [--prompt 512]
//             [--decode 32] [--threads 0] [--no-pin]
//
// --generate writes a random-weight model of a preset shape (default
// qwen3-30b-a3b: 48 layers, d 2048, 32/4 heads x 128, 128 experts top-8,
// expert FFN 768; qwen3.5-35b-a3b: 40 layers, 30 gated DeltaNet + 10 gated
// attention; gpt-oss-20b / gpt-oss-120b: 24 / 36 layers, half of them on a
// 128-token window; --layers overrides the layer count) in the preset's
// file type (Q4_K_M; gpt-oss: MXFP4 experts, Q8_0 elsewhere) to PATH first
// when PATH does not exist (services/cli/test_model.h). Prints
// "key: value" lines: prefill and decode tokens/s, the share of time in the
// CPU experts, the GPU memory plan and peak use; the streamed-prefill
// switch-over measured on this machine and prefill with it (and with every
// expert streamed); decode attention time at the full context; then decode
// again (twice: warming, warm) with the frequency-aware hot-expert cache
// filling the rest of the budget, its hit rate and prefetch accuracy.
// --no-pin leaves the experts' host source pageable.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/cuda_forward.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/internal/ops.h"
#include "services/cli/test_model.h"
#include "common/plan/byte_size.h"
#include "services/dense/sequence_runner.h"

namespace moesplit {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Args {
  std::string model;
  bool generate = false;
  std::string preset = "qwen3-30b-a3b";
  int64_t layers = 0;  // 0: the preset's
  uint64_t gpu_memory = uint64_t{8} << 30;
  int64_t ctx = 65536;
  GgmlType kv = GgmlType::kQ8_0;
  int prompt = 512;
  int decode = 32;
  int threads = 0;
  bool pin = true;  // page-lock the experts' host source for the copies
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--model") a->model = val();
    else if (k == "--generate") a->generate = true;
    else if (k == "--preset") a->preset = val();
    else if (k == "--layers") a->layers = std::atoll(val().c_str());
    else if (k == "--gpu-memory") {
      auto bytes = plan::ParseByteSize(val());
      if (!bytes.ok()) return false;
      a->gpu_memory = *bytes;
    }
    else if (k == "--ctx") a->ctx = std::atoll(val().c_str());
    else if (k == "--kv-type") {
      auto t = GgmlTypeFromName(val());
      if (!t) return false;
      a->kv = *t;
    } else if (k == "--prompt") a->prompt = std::atoi(val().c_str());
    else if (k == "--decode") a->decode = std::atoi(val().c_str());
    else if (k == "--threads") a->threads = std::atoi(val().c_str());
    else if (k == "--no-pin") a->pin = false;
    else return false;
  }
  return !a->model.empty() && a->prompt > 0 && a->decode >= 0 && a->ctx > a->prompt + a->decode;
}

void Line(const std::string& k, const std::string& v) {
  std::printf("%s: %s\n", k.c_str(), v.c_str());
  std::fflush(stdout);
}
std::string GiB(uint64_t b) { return absl::StrCat(b / 1048576.0 / 1024.0, " GiB (", b, " bytes)"); }

// Decode attention alone at the full context: one layer's paged KV cache of
// a.ctx positions (a.kv type) filled with random keys and values, one query
// token at the last position; the split-K kernel's time x n_layer.
absl::Status AttentionAtFullContext(backend::Device* dev, const model::HyperParams& hp,
                                    const Args& a) {
  const int64_t kd = hp.n_head_kv * hp.head_dim_k, page = 256;
  const int64_t n_pages = (a.ctx + page - 1) / page;
  const auto rb = RowBytes(a.kv, kd);
  if (!rb) return absl::InvalidArgumentError("KV row size");
  ASSIGN_OR_RETURN(auto stream, dev->CreateStream());
  ASSIGN_OR_RETURN(auto kbuf, dev->Allocate(n_pages * page * *rb));
  ASSIGN_OR_RETURN(auto vbuf, dev->Allocate(n_pages * page * *rb));
  ASSIGN_OR_RETURN(auto table, dev->Allocate(n_pages * sizeof(int32_t)));
  const int64_t chunk = 4096;
  ASSIGN_OR_RETURN(auto src, dev->Allocate(chunk * kd * sizeof(float)));
  const int64_t qn = hp.n_head * hp.head_dim_k;
  ASSIGN_OR_RETURN(auto q, dev->Allocate(qn * sizeof(float)));
  ASSIGN_OR_RETURN(auto out, dev->Allocate(qn * sizeof(float)));
  const int64_t split_elems = cuda::raw::AttentionScratchElems(
      static_cast<int>(hp.n_head), static_cast<int>(hp.head_dim_k), a.ctx);
  ASSIGN_OR_RETURN(auto split, dev->Allocate(split_elems * sizeof(float)));
  std::vector<int32_t> ids(n_pages);
  for (int64_t i = 0; i < n_pages; ++i) ids[i] = static_cast<int32_t>(i);
  RETURN_IF_ERROR(stream->CopyToDevice(*table, 0, ids.data(), ids.size() * sizeof(int32_t)));
  std::vector<float> host(chunk * kd);
  uint64_t x = 88172645463325252ull;
  for (float& f : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) / 1000.0f;
  }
  RETURN_IF_ERROR(stream->CopyToDevice(*src, 0, host.data(), host.size() * sizeof(float)));
  RETURN_IF_ERROR(stream->CopyToDevice(*q, 0, host.data(), qn * sizeof(float)));
  cuda::raw::PagedKv kv;
  kv.type = a.kv;
  kv.k = static_cast<uint8_t*>(kbuf->data());
  kv.v = static_cast<uint8_t*>(vbuf->data());
  kv.k_row_bytes = kv.v_row_bytes = *rb;
  kv.page_size = static_cast<int>(page);
  kv.block_table = static_cast<const int32_t*>(table->data());
  const float* s = static_cast<const float*>(src->data());
  for (int64_t p0 = 0; p0 < a.ctx; p0 += chunk) {
    const int64_t n = std::min(chunk, a.ctx - p0);
    RETURN_IF_ERROR(cuda::ToStatus(
        cuda::raw::KvWrite(kv, s, s, n, p0, kd, kd, stream->native())));
  }
  cuda::raw::AttentionParams p;
  p.q = static_cast<const float*>(q->data());
  p.out = static_cast<float*>(out->data());
  p.kv = kv;
  p.n_tok = 1;
  p.pos0 = a.ctx - 1;
  p.n_head = static_cast<int>(hp.n_head);
  p.n_head_kv = static_cast<int>(hp.n_head_kv);
  p.head_dim = static_cast<int>(hp.head_dim_k);
  p.scale = 0.088f;
  p.split_scratch = static_cast<float*>(split->data());
  p.split_scratch_elems = split_elems;
  RETURN_IF_ERROR(cuda::ToStatus(cuda::raw::Attention(p, stream->native())));
  RETURN_IF_ERROR(stream->Synchronize());
  const int reps = 20;
  const auto t = Clock::now();
  for (int i = 0; i < reps; ++i) {
    RETURN_IF_ERROR(cuda::ToStatus(cuda::raw::Attention(p, stream->native())));
  }
  RETURN_IF_ERROR(stream->Synchronize());
  const double per_layer = Since(t) / reps;
  Line("decode_attention_ms_per_token_at_full_ctx",
       absl::StrCat(1e3 * per_layer * hp.n_layer, " (ctx ", a.ctx, ", ",
                    std::string(GgmlTypeName(a.kv)), " KV, ", hp.n_layer, " layers x ",
                    1e3 * per_layer, " ms)"));
  return absl::OkStatus();
}

int Run(const Args& a) {
  // The device first: without one there is nothing to measure (and no
  // reason to write an 18 GB model).
  auto dev = cuda::CreateCudaDevice(0);
  if (!dev.ok()) {
    std::fprintf(stderr, "no GPU: %s\n", std::string(dev.status().message()).c_str());
    Line("status", "no CUDA device");
    return 3;
  }
  Line("device", (*dev)->name());
  if (!std::filesystem::exists(a.model)) {
    if (!a.generate) {
      std::fprintf(stderr, "%s does not exist (use --generate)\n", a.model.c_str());
      return 2;
    }
    auto spec = cli::PresetSpec(a.preset);
    if (!spec.ok()) {
      std::fprintf(stderr, "preset: %s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    // The preset's file type: Q4_K_M for the Qwen presets, MXFP4 experts
    // (as published) for gpt-oss.
    if (a.layers > 0) spec->n_layer = a.layers;
    spec->n_ctx = std::max<int64_t>(spec->n_ctx, a.ctx);
    const auto t = Clock::now();
    absl::Status s = cli::WriteTestModel(*spec, a.model);
    if (!s.ok()) {
      std::fprintf(stderr, "generate: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    Line("generate_seconds", absl::StrCat(Since(t)));
  }
  Line("model_file_bytes", absl::StrCat(std::filesystem::file_size(a.model)));
  auto t_load = Clock::now();
  auto model = model::Model::Open(a.model);
  if (!model.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  {
    const model::HyperParams& hp = (*model)->hparams();
    Line("model_layers", absl::StrCat(hp.arch, ", ", hp.n_layer, " layers: ",
                                      hp.n_attention_layers(), " attention, ",
                                      hp.n_recurrent_layers(), " gated DeltaNet"));
  }
  ThreadPool pool(a.threads);
  Line("cpu_threads", absl::StrCat(pool.size()));
  model::InProcessExperts experts(model::LocalExpertStore(*model, &pool), &pool);
  cuda::CudaForwardOptions o;
  o.n_ctx = a.ctx;
  o.kv_type = a.kv;
  o.gpu_memory_budget = a.gpu_memory;
  o.pin_expert_source = a.pin;
  auto fwd = cuda::CudaForward::Create(*model, &experts, dev->get(), o);
  if (!fwd.ok()) {
    std::fprintf(stderr, "CudaForward: %s\n", std::string(fwd.status().message()).c_str());
    return 1;
  }
  auto cache = (*fwd)->CreateCache();
  if (!cache.ok()) {
    std::fprintf(stderr, "KV cache: %s\n", std::string(cache.status().message()).c_str());
    return 1;
  }
  const plan::MemoryPlan& plan = (*fwd)->plan();
  Line("load_seconds", absl::StrCat(Since(t_load)));
  Line("gpu_memory_budget", GiB(a.gpu_memory));
  Line("plan_dense_weights", GiB(plan.dense.total()));
  Line("plan_kv_cache", absl::StrCat(GiB(plan.kv_cache), " ctx ", a.ctx, " ",
                                     std::string(GgmlTypeName(a.kv))));
  if (plan.recurrent_state > 0) Line("plan_recurrent_state", GiB(plan.recurrent_state));
  Line("plan_workspace", GiB(plan.workspace.total()));
  Line("expert_source_pinned", (*fwd)->stats().expert_source_pinned ? "yes" : "no");

  const int64_t nv = (*model)->hparams().n_vocab;
  std::vector<int32_t> prompt(a.prompt);
  for (int i = 0; i < a.prompt; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % nv);
  std::vector<float> logits;
  // Warm-up (CUDA module loading, page faults of the mapping), then reset.
  absl::Status s = (*fwd)->Eval(absl::MakeSpan(prompt).subspan(0, 16), cache->get(),
                                model::LogitsMode::kLast, &logits);
  if (s.ok()) {
    (*cache)->Clear();
    const int32_t one[1] = {1};
    s = (*fwd)->Eval(one, cache->get(), model::LogitsMode::kLast, &logits);
    (*cache)->Clear();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "warm-up: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double e0 = (*fwd)->stats().expert_seconds;
  auto t = Clock::now();
  s = (*fwd)->Eval(prompt, cache->get(), model::LogitsMode::kLast, &logits);
  const double prefill_s = Since(t);
  if (!s.ok()) {
    std::fprintf(stderr, "prefill: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double prefill_expert_s = (*fwd)->stats().expert_seconds - e0;
  Line("prefill_tokens", absl::StrCat(a.prompt));
  Line("prefill_tok_per_s", absl::StrCat(a.prompt / prefill_s));
  Line("prefill_seconds", absl::StrCat(prefill_s));
  Line("prefill_cpu_expert_share", absl::StrCat(prefill_expert_s / prefill_s));

  // Streamed prefill: the switch-over measured here, then the same prompt
  // with experts of that many tokens or more computed on the GPU, and with
  // every expert streamed.
  {
    t = Clock::now();
    auto sw = (*fwd)->MeasurePrefillSwitch(256);
    if (!sw.ok()) {
      Line("stream_switch", std::string(sw.status().message()));
    } else {
      const plan::PrefillRates& r = (*fwd)->prefill_rates();
      Line("stream_switch", absl::StrCat(
          "threshold ", sw->threshold_tokens ? absl::StrCat(*sw->threshold_tokens) : "never",
          " tokens per expert (h2d ", r.h2d_bytes_per_s / 1e9, " GB/s, GPU expert ",
          r.gpu_flops_per_s / 1e12, " TFLOP/s, CPU ", r.cpu_tokens_per_s,
          " expert-tokens/s; measured in ", Since(t), " s)"));
      const int64_t measured = (*fwd)->stream_min_tokens();
      for (int64_t threshold : {measured, int64_t{1}}) {
        if (threshold == 0) continue;
        (*fwd)->set_stream_min_tokens(threshold);
        const cuda::CudaForwardStats b = (*fwd)->stats();
        (*cache)->Clear();
        t = Clock::now();
        s = (*fwd)->Eval(prompt, cache->get(), model::LogitsMode::kLast, &logits);
        const double st_s = Since(t);
        if (!s.ok()) {
          std::fprintf(stderr, "streamed prefill: %s\n", std::string(s.message()).c_str());
          return 1;
        }
        const cuda::CudaForwardStats e = (*fwd)->stats();
        Line(threshold == 1 ? "prefill_all_streamed_tok_per_s" : "prefill_streamed_tok_per_s",
             absl::StrCat(a.prompt / st_s, " (threshold ", threshold, ": ",
                          e.streamed_experts - b.streamed_experts, " experts streamed, ",
                          (e.streamed_bytes - b.streamed_bytes) / 1e9, " GB copied, ",
                          e.streamed_pairs - b.streamed_pairs, " pairs on the GPU, ",
                          e.expert_cache_misses - b.expert_cache_misses, " on the CPU)"));
      }
      (*fwd)->set_stream_min_tokens(measured);
      (*cache)->Clear();
      s = (*fwd)->Eval(prompt, cache->get(), model::LogitsMode::kLast, &logits);
      if (!s.ok()) return 1;
    }
  }

  const double e1 = (*fwd)->stats().expert_seconds;
  const cuda::CudaForwardStats d0 = (*fwd)->stats();
  t = Clock::now();
  for (int i = 0; i < a.decode; ++i) {
    const int32_t next[1] = {static_cast<int32_t>(model::internal::Argmax(logits.data(), nv))};
    s = (*fwd)->Eval(next, cache->get(), model::LogitsMode::kLast, &logits);
    if (!s.ok()) {
      std::fprintf(stderr, "decode: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const double decode_s = Since(t);
  Line("decode_tokens", absl::StrCat(a.decode));
  Line("decode_tok_per_s", absl::StrCat(a.decode / decode_s));
  const double decode_expert_s = (*fwd)->stats().expert_seconds - e1;
  Line("decode_cpu_expert_share", absl::StrCat(decode_expert_s / decode_s));
  Line("decode_ms_per_token", absl::StrCat(1e3 * decode_s / std::max(1, a.decode)));
  Line("decode_ms_per_token_outside_cpu_experts",
       absl::StrCat(1e3 * (decode_s - decode_expert_s) / std::max(1, a.decode)));
  {
    // Where the time outside the CPU experts goes (host view, per token).
    const cuda::CudaForwardStats d1 = (*fwd)->stats();
    const double per = 1e3 / std::max(1, a.decode);
    const double enq = d1.enqueue_seconds - d0.enqueue_seconds;
    const double wait = d1.gpu_wait_seconds - d0.gpu_wait_seconds;
    const double host = d1.host_seconds - d0.host_seconds;
    const double head = d1.head_seconds - d0.head_seconds;
    const double eval = d1.eval_seconds - d0.eval_seconds;
    Line("decode_ms_per_token_breakdown",
         absl::StrCat("enqueue ", per * enq, " (attention+norm+router launches), gpu_wait ",
                      per * wait, ", host ", per * host, " (expert call, partial upload), ",
                      "cpu_experts ", per * decode_expert_s, ", head ", per * head, ", rest ",
                      per * (eval - enq - wait - host - head - decode_expert_s), ", outside Eval ",
                      per * (decode_s - eval)));
  }
  if (absl::Status st = AttentionAtFullContext(dev->get(), (*model)->hparams(), a); !st.ok()) {
    std::fprintf(stderr, "attention at full context: %s\n", std::string(st.message()).c_str());
  }
  // Hot-expert cache: the budget left after the plan (less 256 MiB) in
  // slots, driven by the frequency-aware policy with next-layer prefetch.
  // Routing in a random-weight model is near uniform, so the hit rate is
  // about the resident fraction; real models route far more unevenly.
  const uint64_t margin = uint64_t{256} << 20;
  const uint64_t used = (*dev)->allocated_bytes();
  const uint64_t left = a.gpu_memory > used + margin ? a.gpu_memory - used - margin : 0;
  const uint64_t slot = cuda::GpuExpertCache::SlotBytes(**model);
  const int64_t n_slots = slot > 0 ? static_cast<int64_t>(left / slot) : 0;
  if (n_slots > 0 && a.decode > 0) {
    cuda::GpuExpertCacheOptions co;
    co.n_slots = n_slots;
    auto cache_or = cuda::GpuExpertCache::Create(dev->get(), *model, co);
    if (!cache_or.ok()) {
      std::fprintf(stderr, "expert cache: %s\n", std::string(cache_or.status().message()).c_str());
    } else {
      std::shared_ptr<cuda::GpuExpertCache> ec = std::move(*cache_or);
      Line("expert_cache_slots", absl::StrCat(ec->options().n_slots, " of ", GiB(slot), " = ",
                                              GiB(ec->bytes())));
      (*fwd)->AttachExpertCache(ec);
      // Two passes of a.decode tokens: the first fills the cache.
      for (int pass = 0; pass < 2; ++pass) {
        const cuda::CudaForwardStats b = (*fwd)->stats();
        const model::ExpertCacheStats pb = ec->policy().stats();
        t = Clock::now();
        for (int i = 0; i < a.decode && s.ok(); ++i) {
          const int32_t next[1] = {static_cast<int32_t>(model::internal::Argmax(logits.data(), nv))};
          s = (*fwd)->Eval(next, cache->get(), model::LogitsMode::kLast, &logits);
        }
        const double cached_s = Since(t);
        if (!s.ok()) {
          std::fprintf(stderr, "cached decode: %s\n", std::string(s.message()).c_str());
          return 1;
        }
        const cuda::CudaForwardStats e = (*fwd)->stats();
        const model::ExpertCacheStats pe = ec->policy().stats();
        const double hits = static_cast<double>(e.expert_cache_hits - b.expert_cache_hits);
        const double misses = static_cast<double>(e.expert_cache_misses - b.expert_cache_misses);
        const double ph = static_cast<double>(pe.prefetch_hits - pb.prefetch_hits);
        const double pm = static_cast<double>(pe.prefetch_misses - pb.prefetch_misses);
        const std::string tag = pass == 0 ? "_warming" : "";
        Line("decode_with_expert_cache" + tag + "_tok_per_s", absl::StrCat(a.decode / cached_s));
        Line("expert_cache_hit_rate" + tag,
             absl::StrCat(hits / std::max(1.0, hits + misses), " of (token, expert) pairs; ",
                          "prefetch predictions routed ", ph / std::max(1.0, ph + pm), "; ",
                          pe.admissions - pb.admissions, " admissions, ",
                          (pe.h2d_bytes - pb.h2d_bytes) / 1e9, " GB host->device; resident ",
                          ec->n_resident(), " experts"));
      }
    }
  } else {
    Line("expert_cache_hit_rate", "no cache (no budget left for experts)");
  }
  Line("gpu_peak_allocated", GiB((*dev)->peak_allocated_bytes()));
  auto mem = (*dev)->Memory();
  if (mem.ok()) Line("gpu_used_now_device_wide", GiB(mem->total_bytes - mem->free_bytes));
  return 0;
}

}  // namespace
}  // namespace moesplit

int main(int argc, char** argv) {
  moesplit::Args a;
  if (!moesplit::Parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: gpu_bench --model PATH [--generate [--preset NAME] [--layers N]] "
                 "[--gpu-memory 8GiB] [--ctx 65536] [--kv-type q8_0] [--prompt 512] "
                 "[--decode 32] [--threads 0] [--no-pin]\n");
    return 2;
  }
  return moesplit::Run(a);
}
