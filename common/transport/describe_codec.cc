#include "common/transport/describe_codec.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::transport {

void ToProto(const WorkerDescription& d, moesplit::v1::DescribeResponse* out) {
  out->set_model_identity(d.model_identity);
  out->set_model_name(d.model_name);
  out->set_architecture(d.architecture);
  out->set_n_layer(d.n_layer);
  out->set_n_expert(d.n_expert);
  out->set_d(d.d);
  out->set_n_ff(d.n_ff);
  out->set_layer_begin(d.layer_begin);
  out->set_layer_end(d.layer_end);
  out->set_expert_begin(d.expert_begin);
  out->set_expert_end(d.expert_end);
  for (const auto& f : d.formats) out->add_formats(f);
  for (const auto& n : d.numa_nodes) {
    auto* p = out->add_numa_nodes();
    p->set_node(n.node);
    p->set_resident_bytes(n.resident_bytes);
    p->set_threads(n.threads);
  }
  out->set_threads(d.threads);
  out->set_resident_bytes(d.resident_bytes);
  out->set_worker_id(d.worker_id);
  out->set_max_tokens(d.max_tokens);
  out->set_expert_ffn(d.expert_ffn);
}

WorkerDescription FromProto(const moesplit::v1::DescribeResponse& p) {
  WorkerDescription d;
  d.model_identity = p.model_identity();
  d.model_name = p.model_name();
  d.architecture = p.architecture();
  d.n_layer = p.n_layer();
  d.n_expert = p.n_expert();
  d.d = p.d();
  d.n_ff = p.n_ff();
  d.layer_begin = p.layer_begin();
  d.layer_end = p.layer_end();
  d.expert_begin = p.expert_begin();
  d.expert_end = p.expert_end();
  d.formats.assign(p.formats().begin(), p.formats().end());
  for (const auto& n : p.numa_nodes()) {
    d.numa_nodes.push_back({n.node(), n.resident_bytes(), n.threads()});
  }
  d.threads = p.threads();
  d.resident_bytes = p.resident_bytes();
  d.worker_id = p.worker_id();
  d.max_tokens = p.max_tokens();
  d.expert_ffn = p.expert_ffn().empty() ? "swiglu" : p.expert_ffn();
  return d;
}

absl::Status CheckIdentity(const std::string& address, const WorkerDescription& worker,
                           const std::string& expected) {
  if (expected.empty() || worker.model_identity == expected) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "expert worker ", address, " serves model ", worker.model_identity, " ('",
      worker.model_name, "'), but this dense service runs model ", expected));
}

absl::Status CheckExpertFfn(const std::string& address, const WorkerDescription& worker,
                            const std::string& expected) {
  if (expected.empty() || worker.expert_ffn == expected) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "expert worker ", address, " computes experts as '", worker.expert_ffn,
      "', but this model's experts are '", expected, "' (a worker binary that predates the model?)"));
}

}  // namespace moesplit::transport
