// moesplit plan: the dense service's GPU memory plan (common/plan) for a
// model file, or for a named shape and file type without any file.
#include <algorithm>
#include <cinttypes>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/model/model.h"
#include "common/plan/byte_size.h"
#include "common/plan/memory_plan.h"
#include "services/cli/commands.h"
#include "services/cli/dense_flags.h"
#include "services/cli/test_model.h"
#include "services/cli/type_mix.h"
#include "nlohmann/json.hpp"

namespace moesplit::cli {
namespace {

// The tensor table of a preset shape with a file type's mix (as
// make-test-model would write it). "qwen3-30b-a3b" gets the real model's
// vocabulary (151936) and training context (40960) unless --vocab is given.
absl::StatusOr<plan::ModelShape> PresetShape(const std::string& preset,
                                             const std::string& type, int64_t vocab) {
  ASSIGN_OR_RETURN(TestModelSpec spec, PresetSpec(preset));
  if (absl::AsciiStrToLower(preset) == "qwen3-30b-a3b") {
    spec.n_vocab = 151936;
    spec.n_ctx = 40960;
  }
  if (vocab > 0) spec.n_vocab = vocab;
  if (!type.empty()) spec.type = type;  // else the preset's (gpt-oss: MXFP4_MOE)
  ASSIGN_OR_RETURN(std::vector<PlannedTensor> tensors, PlanTensors(spec));
  plan::ModelShape s;
  s.hp = ToHyperParams(spec);
  s.tied_output = true;
  for (PlannedTensor& t : tensors) {
    plan::ShapeTensor st;
    int layer = -1;
    if (absl::StartsWith(t.name, "blk.")) {
      const size_t dot = t.name.find('.', 4);
      if (!absl::SimpleAtoi(absl::string_view(t.name).substr(4, dot - 4), &layer)) layer = -1;
    }
    if (t.name == "output.weight") s.tied_output = false;
    st.name = t.name;
    st.role = t.role;
    st.layer = layer;
    st.type = t.type;
    st.ne = t.ne;
    RETURN_IF_ERROR(plan::SetTensorBytes(&st));
    // NextN / MTP blocks (after the trunk) are planned apart.
    (layer >= s.hp.n_layer ? s.nextn_tensors : s.tensors).push_back(std::move(st));
  }
  return s;
}

}  // namespace

absl::Status RunPlan(const Args& args, const CommandIo& io) {
  // The dense service's defaults: the plan printed is the one it runs with
  // the same flags (dense_flags.h).
  const DenseServiceFlags service;
  const plan::PlanOptions plan_defaults;
  std::string model_path, preset, type, gpu_memory, kv_type = service.kv_type, worker_memory;
  std::string prefix_cache = service.prefix_cache, cache_memory = service.cache_memory,
              cache_ram = service.cache_ram, cache_device = service.cache_device;
  std::string margin = plan::FormatBytes(plan_defaults.margin_bytes);
  margin.erase(std::remove(margin.begin(), margin.end(), ' '), margin.end());
  std::string expert_cache = service.expert_cache;
  int64_t ctx = service.ctx, parallel = service.parallel,
          ubatch = std::min(service.step_tokens, plan::kGpuMaxMicroBatch);
  int64_t vocab = 0;
  bool json = false;
  FlagParser f;
  f.AddString("model|m", &model_path, "GGUF model (required, or --preset)").Meta("PATH");
  f.AddString("preset", &preset,
              absl::StrCat("plan for a shape without a file: ", absl::StrJoin(PresetNames(), " | "),
                           " (required, or --model)"))
      .Meta("NAME");
  f.AddString("type", &type,
              absl::StrCat("file type of --preset: ", absl::StrJoin(FileTypeMixNames(), " ")))
      .Meta("TYPE")
      .DefaultText("the preset's: Q4_K_M, gpt-oss MXFP4_MOE");
  f.AddInt("vocab", &vocab, "vocabulary size of --preset")
      .DefaultText("the preset's")
      .Range(0, 1 << 24);
  f.AddString("gpu-memory", &gpu_memory,
              "GPU memory budget, e.g. 8GiB, 7.5G, 8000MiB, bytes")
      .Meta("SIZE")
      .Required();
  f.AddInt("ctx|c", &ctx,
           "context positions per sequence, as moesplit-dense --ctx (capped at the model's "
           "context, as the service does, unless given)")
      .Range(16, 1 << 24);
  f.AddString("kv-type", &kv_type, "KV cache element type").OneOf({"f16", "q8_0", "q4_0"});
  f.AddInt("parallel", &parallel, "sequences served at once, as moesplit-dense --parallel")
      .Range(1, 1024);
  f.AddInt("ubatch", &ubatch,
           "largest micro-batch in tokens (moesplit-dense: its --step-tokens, at most 4096)")
      .Range(1, plan::kGpuMaxMicroBatch);
  f.AddString("expert-cache", &expert_cache, "as moesplit-dense --expert-cache: auto | off | N slots");
  f.AddString("prefix-cache", &prefix_cache, "as moesplit-dense --prefix-cache")
      .OneOf({"on", "off"});
  f.AddString("cache-memory", &cache_memory, "as moesplit-dense --cache-memory")
      .Meta("SIZE")
      .DefaultText("the sequence slots' state at the full context");
  f.AddString("cache-ram", &cache_ram, "as moesplit-dense --cache-ram").Meta("SIZE");
  f.AddString("cache-device", &cache_device, "as moesplit-dense --cache-device").Meta("SIZE");
  f.AddString("margin", &margin, "memory kept free for rounding and small buffers").Meta("SIZE");
  f.AddString("worker-memory", &worker_memory,
              "also plan expert-workers of this much memory for routed experts: how many, and "
              "the layer range (--shard) each holds")
      .Meta("SIZE")
      .DefaultText("none: no worker plan");
  std::string host_memory, disk_read;
  f.AddString("host-memory", &host_memory,
              "RAM for routed experts per host (a worker's --expert-ram): which share of each "
              "shard stays in RAM and the disk bytes a decode token reads")
      .Meta("SIZE")
      .DefaultText("none");
  f.AddString("disk-read", &disk_read,
              "with --host-memory: the disk's read rate per second (e.g. 7GB from dd "
              "iflag=direct), for the decode rate it bounds")
      .Meta("SIZE")
      .DefaultText("none: no decode rate");
  f.AddBool("json", &json, "print the plan as JSON");
  ASSIGN_OR_RETURN(bool go, ParseFlags(f, args,
                                       "plan (--model M | --preset P) --gpu-memory SIZE "
                                       "[--ctx N] [--kv-type f16|q8_0|q4_0] [--parallel N] [--json]",
                                       io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: unexpected argument '", f.positional()[0], "'"));
  }
  if (model_path.empty() == preset.empty()) {
    return absl::InvalidArgumentError("plan: give exactly one of --model and --preset");
  }
  plan::PlanOptions o;
  absl::StatusOr<uint64_t> budget = plan::ParseByteSize(gpu_memory);
  if (!budget.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-memory: ", budget.status().message()));
  }
  absl::StatusOr<uint64_t> margin_bytes = plan::ParseByteSize(margin);
  if (!margin_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--margin: ", margin_bytes.status().message()));
  }
  o.budget_bytes = *budget;
  o.margin_bytes = *margin_bytes;
  ASSIGN_OR_RETURN(o.kv_type, plan::ParseKvType(kv_type));
  o.n_parallel = parallel;
  o.n_ubatch = ubatch;
  absl::StatusOr<int64_t> slots = ParseAutoOffOrCount(expert_cache);
  if (!slots.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--expert-cache: ", slots.status().message()));
  }
  o.expert_cache_slots = *slots;
  if (prefix_cache == "on") {
    absl::StatusOr<uint64_t> d = plan::ParseByteSize(cache_device);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--cache-device: ", d.status().message()));
    o.prefix_cache_device_bytes = *d;
  }

  plan::ModelShape shape;
  if (!model_path.empty()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const model::Model> m, model::Model::Open(model_path));
    shape = plan::ShapeOfModel(*m);
  } else {
    ASSIGN_OR_RETURN(shape, PresetShape(preset, type, vocab));
  }
  // The workers are planned from the shape alone (printed even when the GPU
  // plan does not fit).
  std::vector<plan::WorkerShare> workers;
  uint64_t worker_bytes = 0;
  if (!worker_memory.empty()) {
    absl::StatusOr<uint64_t> wb = plan::ParseByteSize(worker_memory);
    if (!wb.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--worker-memory: ", wb.status().message()));
    }
    worker_bytes = *wb;
    absl::StatusOr<std::vector<plan::WorkerShare>> w = plan::PlanWorkers(shape, worker_bytes);
    if (!w.ok()) {
      if (w.status().code() == absl::StatusCode::kResourceExhausted) {
        return absl::FailedPreconditionError(absl::StrCat("workers do not fit: ", w.status().message()));
      }
      return w.status();
    }
    workers = *std::move(w);
  }
  std::optional<plan::HostTierPlan> host_tier;
  uint64_t disk_rate = 0;
  if (!host_memory.empty()) {
    absl::StatusOr<uint64_t> hb = plan::ParseByteSize(host_memory);
    if (!hb.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--host-memory: ", hb.status().message()));
    }
    if (!disk_read.empty()) {
      absl::StatusOr<uint64_t> r = plan::ParseByteSize(disk_read);
      if (!r.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--disk-read: ", r.status().message()));
      }
      disk_rate = *r;
    }
    absl::StatusOr<plan::HostTierPlan> t = plan::PlanHostTier(shape, *hb, workers);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--host-memory: ", t.status().message()));
    host_tier = *std::move(t);
  }
  // moesplit-dense caps its context at the model's; a --ctx given here is
  // planned as given (e.g. for a longer context than the file says).
  o.n_ctx = f.WasSet("ctx") ? ctx : std::min<int64_t>(ctx, shape.hp.n_ctx_train);
  absl::StatusOr<plan::MemoryPlan> p = plan::PlanMemory(shape, o);
  if (!p.ok()) {
    // A configuration that does not fit is the caller's to change: exit 2.
    if (p.status().code() == absl::StatusCode::kResourceExhausted) {
      if (!workers.empty() && !json) {
        std::fputs(plan::FormatWorkers(workers, worker_bytes).c_str(), io.out);
      }
      if (host_tier && !json) std::fputs(plan::FormatHostTier(*host_tier, disk_rate).c_str(), io.out);
      return absl::FailedPreconditionError(
          absl::StrCat("plan does not fit: ", p.status().message()));
    }
    return p.status();
  }
  // The prefix cache's primary and host tiers live in host RAM (not in the
  // GPU budget; its device tier is a row of the GPU plan); the primary
  // tier's default is what the sequence slots hold (the service's rule,
  // dense_engine.h).
  uint64_t primary = 0, host = 0;
  if (prefix_cache == "on") {
    primary = p->kv_cache + p->recurrent_state;
    if (!cache_memory.empty()) {
      absl::StatusOr<uint64_t> b = plan::ParseByteSize(cache_memory);
      if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat("--cache-memory: ", b.status().message()));
      primary = *b;
    }
    absl::StatusOr<uint64_t> h = plan::ParseByteSize(cache_ram);
    if (!h.ok()) return absl::InvalidArgumentError(absl::StrCat("--cache-ram: ", h.status().message()));
    host = *h;
  }
  std::string text = json ? plan::FormatPlanJson(*p) : plan::FormatPlanTable(*p);
  if (json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    j["prefix_cache"] = {{"enabled", prefix_cache == "on"},
                         {"device_bytes", p->prefix_cache_device},
                         {"primary_bytes", primary},
                         {"host_bytes", host}};
    if (!workers.empty()) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const plan::WorkerShare& w : workers) {
        list.push_back({{"layer_begin", w.layer_begin},
                        {"layer_end", w.layer_end},
                        {"shard", absl::StrCat("layers=", w.layer_begin, "-", w.layer_end - 1)},
                        {"bytes", w.bytes}});
      }
      j["workers"] = {{"worker_bytes", worker_bytes}, {"list", list}};
    }
    if (host_tier) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const plan::HostTierShare& s : host_tier->shares) {
        list.push_back({{"layer_begin", s.layer_begin},
                        {"layer_end", s.layer_end},
                        {"expert_bytes", s.expert_bytes},
                        {"ram_bytes", s.ram_bytes},
                        {"resident_share", s.resident_share},
                        {"disk_bytes_per_token", s.disk_bytes_per_token}});
      }
      j["host_tier"] = {{"host_bytes", host_tier->host_bytes},
                        {"disk_bytes_per_token", host_tier->disk_bytes_per_token},
                        {"shares", list}};
      if (disk_rate > 0 && host_tier->disk_bytes_per_token > 0) {
        j["host_tier"]["decode_tokens_per_second_disk_bound"] =
            static_cast<double>(disk_rate) / host_tier->disk_bytes_per_token;
      }
    }
    text = j.dump(2) + "\n";
  } else {
    if (prefix_cache == "on") {
      absl::StrAppend(&text, "prefix cache: device tier ",
                      p->prefix_cache_device > 0 ? plan::FormatBytes(p->prefix_cache_device)
                                                 : "off (--cache-device 0)",
                      "; host RAM: primary tier ", plan::FormatBytes(primary),
                      cache_memory.empty() ? " (the sequence slots' state)" : "",
                      ", host tier ", host > 0 ? plan::FormatBytes(host) : "off (--cache-ram 0)",
                      "\n");
    } else {
      text += "prefix cache: off\n";
    }
    if (!workers.empty()) text += plan::FormatWorkers(workers, worker_bytes);
    if (host_tier) text += plan::FormatHostTier(*host_tier, disk_rate);
  }
  std::fputs(text.c_str(), io.out);
  return absl::OkStatus();
}

}  // namespace moesplit::cli
