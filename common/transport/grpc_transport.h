// gRPC transport (across hosts): the moesplit.v1.ExpertWorker service.
//
// Server: callback API; reactions never block — each call is handed to a
// small executor, which computes it and starts the write. Health checking
// (grpc.health.v1) and reflection are switched on.
// Client: one long-lived Compute stream per connection, a reader thread
// collecting results; a call that outlives the client's timeout cancels the
// stream (UNAVAILABLE naming the worker) and a later call reconnects with
// backoff.
#pragma once

#include <memory>
#include <string>

#include "common/transport/expert_transport.h"

namespace grpc {
class Server;
}

namespace moesplit::transport {

struct GrpcServerOptions {
  std::string listen;  // HOST:PORT (PORT 0 picks a free port)
  int executor_threads = 2;
  CallObserver* observer = nullptr;  // optional, not owned
  // cert + key: TLS; + ca: clients must present a certificate that chains to
  // ca (mutual TLS). Health and reflection are served on the same port.
  auth::TlsPem tls = {};
};

class GrpcExpertServer final : public ExpertServer {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcExpertServer>> Start(
      const GrpcServerOptions& options, const WorkerDescription& description,
      model::ExpertBackend* backend);
  ~GrpcExpertServer() override;

  const std::string& address() const override { return address_; }
  int port() const { return port_; }
  void Shutdown() override;

 private:
  class Service;
  GrpcExpertServer() = default;
  std::string address_;
  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
};

std::unique_ptr<ExpertClient> NewGrpcExpertClient(const std::string& target,
                                                  const ClientOptions& options);

// gRPC status <-> absl::Status (same codes).
}  // namespace moesplit::transport
