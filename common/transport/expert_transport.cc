#include "common/transport/expert_transport.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/transport/grpc_transport.h"
#include "common/transport/shm_transport.h"

namespace moesplit::transport {

absl::Status ReconnectBackoff::MayAttempt() const {
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_attempt_ || peer_seen_.load()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      last_error_.message(), " (reconnecting in ",
      std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt_ - now).count(),
      " ms)"));
}

void ReconnectBackoff::Succeeded() {
  healthy_ = true;
  backoff_ = min_;
}

absl::Status ReconnectBackoff::Failed(absl::Status status) {
  healthy_ = false;
  peer_seen_ = false;
  last_error_ = status;
  next_attempt_ = std::chrono::steady_clock::now() + backoff_;
  backoff_ = std::min(max_, backoff_ * 2);
  return status;
}

absl::Status ExpertClient::ComputeInto(const model::ExpertCallView& call, float* partial,
                                       uint64_t* worker_ns) {
  ASSIGN_OR_RETURN(const uint64_t ticket, Submit(call));
  return Wait(ticket, partial, call.hidden.size(), worker_ns);
}

absl::Status CheckCallTokens(const model::ExpertCallView& call, int max_tokens) {
  if (max_tokens <= 0 || call.n_tokens <= max_tokens) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "call ", call.call_id, " carries ", call.n_tokens,
      " tokens, more than this worker's max_tokens ", max_tokens, " (see Describe)"));
}

absl::StatusOr<std::unique_ptr<ExpertClient>> OpenExpertClient(const std::string& address,
                                                               const ClientOptions& options) {
  static constexpr std::string_view kShm = "shm://";
  static constexpr std::string_view kGrpc = "grpc://";
  if (address.rfind(kShm, 0) == 0) {
    const std::string name = address.substr(kShm.size());
    if (!ValidShmName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad expert address '", address, "': shm name must be [A-Za-z0-9_.-]{1,64}"));
    }
    return NewShmExpertClient(name, options);
  }
  if (address.rfind(kGrpc, 0) == 0 && address.size() > kGrpc.size()) {
    return NewGrpcExpertClient(address.substr(kGrpc.size()), options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad expert address '", address, "': expected shm://NAME or grpc://HOST:PORT"));
}

}  // namespace moesplit::transport
