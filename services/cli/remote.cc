// Clients of running services: `moesplit health` (grpc.health.v1 Check, for
// container health checks) and `moesplit complete` (one streamed completion
// from a dense service, for smoke tests such as the Helm test pod); both
// reach TLS servers (--tls-ca), complete sends an API key.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/auth/api_keys.h"
#include "common/base/status.h"
#include "moesplit/v1/inference.grpc.pb.h"
#include "services/cli/commands.h"
#include "services/cli/remote.h"

namespace moesplit::cli {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& addr) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(addr, ": ", s.error_message()));
}

std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// grpc.health.v1.HealthCheckRequest{service} on the wire: field 1, length-delimited.
std::string EncodeHealthRequest(const std::string& service) {
  if (service.empty()) return "";
  std::string out = "\x0a";
  size_t n = service.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + service;
}

// HealthCheckResponse.status (field 1, varint); 0 (UNKNOWN) when absent.
absl::StatusOr<int> DecodeHealthStatus(const std::string& bytes) {
  if (bytes.empty()) return 0;
  if (bytes.size() < 2 || bytes[0] != '\x08' || (bytes[1] & 0x80) != 0) {
    return absl::DataLossError("malformed grpc.health.v1.HealthCheckResponse");
  }
  return static_cast<int>(bytes[1]);
}

}  // namespace

void ClientSecurityFlags::Register(FlagParser& p, bool with_key) {
  if (with_key) {
    p.AddString("api-key-file", &api_key_file,
                "send the first key of this file as authorization: Bearer KEY")
        .Meta("FILE")
        .DefaultText("$MOESPLIT_API_KEY, else none");
  }
  p.AddString("tls-ca", &tls_ca, "connect over TLS, the server's certificate signed by this CA")
      .Meta("FILE")
      .DefaultText("plain text");
  p.AddString("tls-server-name", &tls_server_name,
              "the name checked in the server's certificate (with --tls-ca)")
      .Meta("NAME")
      .DefaultText("the address's host");
  p.AddString("tls-cert", &tls_cert,
              "client certificate (PEM, with --tls-key) for a server that demands one")
      .Meta("FILE")
      .DefaultText("none");
  p.AddString("tls-key", &tls_key, "the private key of --tls-cert")
      .Meta("FILE")
      .DefaultText("none");
}

absl::StatusOr<ClientSecurity> ClientSecurity::Load(const ClientSecurityFlags& f) {
  ClientSecurity s;
  const char* env = std::getenv(auth::kClientApiKeyEnv);
  ASSIGN_OR_RETURN(s.api_key, auth::LoadClientApiKey(f.api_key_file, env ? env : ""));
  ASSIGN_OR_RETURN(s.tls, auth::ReadTlsFiles(f.tls_cert, f.tls_key, f.tls_ca));
  if (!f.tls_server_name.empty() && !s.tls.client_tls()) {
    return absl::InvalidArgumentError("--tls-server-name needs --tls-ca");
  }
  if (s.tls.server_tls() && !s.tls.client_tls()) {
    return absl::InvalidArgumentError("--tls-cert/--tls-key need --tls-ca (TLS to the server)");
  }
  s.tls.server_name = f.tls_server_name;
  return s;
}

std::shared_ptr<grpc::Channel> ClientSecurity::Channel(const std::string& addr) const {
  return auth::CreateGrpcChannel(addr, tls);
}

void ClientSecurity::Authorize(grpc::ClientContext* ctx) const {
  if (!api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + api_key);
}

absl::StatusOr<std::string> CheckHealth(const std::string& addr, const std::string& service,
                                        int64_t timeout_ms, const ClientSecurity& security) {
  auto channel = security.Channel(addr);
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout_ms));
  const std::string req = EncodeHealthRequest(service);
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status s = done.get_future().get();
  if (!s.ok()) return FromGrpc(s, addr);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::DataLossError("unreadable health response");
  std::string bytes;
  for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  ASSIGN_OR_RETURN(const int status, DecodeHealthStatus(bytes));
  static constexpr const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                           "SERVICE_UNKNOWN"};
  const std::string name = status >= 0 && status < 4 ? kNames[status] : absl::StrCat(status);
  if (status != 1) {
    return absl::UnavailableError(absl::StrCat(addr, ": health status ", name));
  }
  return name;
}

absl::StatusOr<CompletionStats> StreamCompletion(const CompletionRequest& r, const CommandIo& io) {
  auto stub = moesplit::v1::Inference::NewStub(r.security.Channel(r.addr));
  grpc::ClientContext ctx;
  r.security.Authorize(&ctx);
  if (r.timeout_ms > 0) ctx.set_deadline(DeadlineIn(r.timeout_ms));
  moesplit::v1::GenerateRequest req;
  req.set_prompt(r.prompt);
  req.set_max_tokens(static_cast<int>(r.max_tokens));
  req.mutable_sampling()->set_temperature(static_cast<float>(r.temperature));
  req.mutable_sampling()->set_seed(static_cast<uint64_t>(r.seed));
  req.mutable_sampling()->set_has_seed(true);
  const auto start = std::chrono::steady_clock::now();
  auto reader = stub->Generate(&ctx, req);
  moesplit::v1::GenerateResponse resp;
  CompletionStats stats;
  std::chrono::steady_clock::time_point first = start;
  while (reader->Read(&resp)) {
    if (stats.tokens == 0 && resp.token_ids_size() > 0) first = std::chrono::steady_clock::now();
    stats.tokens += resp.token_ids_size();
    if (!resp.finish_reason().empty()) stats.finish_reason = resp.finish_reason();
    std::fwrite(resp.text().data(), 1, resp.text().size(), io.out);
    std::fflush(io.out);
  }
  const grpc::Status s = reader->Finish();
  std::fprintf(io.out, "\n");
  if (!s.ok()) return FromGrpc(s, r.addr);
  const auto end = std::chrono::steady_clock::now();
  stats.ttft_seconds = std::chrono::duration<double>(first - start).count();
  stats.after_first_seconds = std::chrono::duration<double>(end - first).count();
  return stats;
}

absl::Status RunHealth(const Args& args, const CommandIo& io) {
  std::string addr = "127.0.0.1:50051", service;
  int64_t timeout_ms = 3000;
  FlagParser f;
  f.AddString("addr", &addr, "gRPC address of a moesplit service").HostPort();
  f.AddString("service", &service, "service name to check").DefaultText("the whole server");
  f.AddInt("timeout-ms", &timeout_ms, "deadline of the check").Range(1, 86400000).Meta("MS");
  ClientSecurityFlags sf;
  sf.Register(f, /*with_key=*/false);
  ASSIGN_OR_RETURN(const bool go,
                   ParseFlags(f, args, "health [--addr HOST:PORT] [--service S] [--tls-ca FILE]",
                              io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("health: unexpected argument '", f.positional()[0], "'"));
  }
  if (timeout_ms < 1) return absl::InvalidArgumentError("health: --timeout-ms must be >= 1");
  ASSIGN_OR_RETURN(const ClientSecurity security, ClientSecurity::Load(sf));
  ASSIGN_OR_RETURN(const std::string status, CheckHealth(addr, service, timeout_ms, security));
  std::fprintf(io.out, "%s\n", status.c_str());
  return absl::OkStatus();
}

absl::Status RunComplete(const Args& args, const CommandIo& io) {
  CompletionRequest r;
  r.addr = "127.0.0.1:50051";
  r.timeout_ms = 120000;
  FlagParser f;
  f.AddString("addr", &r.addr, "the dense service's gRPC address").HostPort();
  f.AddString("prompt|p", &r.prompt, "prompt text (required)").Meta("TEXT");
  f.AddInt("n", &r.max_tokens, "tokens to generate");
  f.AddDouble("temp", &r.temperature, "sampling temperature (0 = greedy)");
  f.AddInt("seed", &r.seed, "sampling seed");
  f.AddInt("timeout-ms", &r.timeout_ms, "deadline of the whole completion (0 = none)")
      .Range(0, 86400000)
      .Meta("MS");
  ClientSecurityFlags sf;
  sf.Register(f);
  ASSIGN_OR_RETURN(const bool go,
                   ParseFlags(f, args, "complete --addr HOST:PORT --prompt S [-n N]", io));
  if (!go) return absl::OkStatus();
  ASSIGN_OR_RETURN(r.security, ClientSecurity::Load(sf));
  if (r.prompt.empty()) return absl::InvalidArgumentError("complete: --prompt is required");
  if (r.max_tokens < 1) return absl::InvalidArgumentError("complete: -n must be >= 1");
  ASSIGN_OR_RETURN(const CompletionStats st, StreamCompletion(r, io));
  if (st.tokens == 0) {
    return absl::InternalError(absl::StrCat("complete: ", r.addr, " generated no token"));
  }
  std::fprintf(io.err, "moesplit complete: %d tokens, time to first token %.3f s (%s)\n",
               st.tokens, st.ttft_seconds, st.finish_reason.c_str());
  return absl::OkStatus();
}

}  // namespace moesplit::cli
