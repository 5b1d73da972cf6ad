// TLS material of the gRPC servers and channels (the dense service's
// Inference API, the expert-workers' ExpertWorker API and the clients of
// both), read once at start-up from PEM files.
//
//   server, cert + key             TLS
//   server, cert + key + ca        mutual TLS: a client must present a
//                                  certificate that chains to `ca`
//                                  (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY)
//   client, ca                     TLS, the server's certificate verified
//                                  against `ca` (and its name against the
//                                  target's host, or server_name)
//   client, ca + cert + key        the same, presenting a client certificate
//   nothing                        plain text
//
// Thread-safe: plain data and functions.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Channel;
class ChannelArguments;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace moesplit::auth {

struct TlsPem {
  std::string cert, key;    // this side's certificate chain and private key ("" = none)
  std::string ca;           // the CA the peer's certificate must chain to ("" = none)
  std::string server_name;  // client only: the name checked in the server's certificate
                            // instead of the target's host ("" = the host)
  bool server_tls() const { return !cert.empty(); }
  bool client_tls() const { return !ca.empty(); }
};

// Reads the named files (each may be ""). REQUIRES-like checks: cert and key
// both or neither (InvalidArgument naming the flags --tls-cert/--tls-key);
// NotFound naming a file that cannot be read; InvalidArgument for a file
// that holds no PEM block.
absl::StatusOr<TlsPem> ReadTlsFiles(const std::string& cert_file, const std::string& key_file,
                                    const std::string& ca_file);

// "off", "on" (cert + key) or "mutual" (cert + key + ca): the servers' log.
const char* ServerTlsMode(const TlsPem& tls);

// Server credentials: insecure without a certificate; TLS with one; mutual
// TLS when `tls.ca` is set too.
std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsPem& tls);

// A channel to `target`: plain text without `tls.ca`, else TLS verifying the
// server against it (presenting cert/key when set; server_name overriding
// the name checked). `args` carries the caller's other channel settings.
std::shared_ptr<grpc::Channel> CreateGrpcChannel(const std::string& target, const TlsPem& tls,
                                                 grpc::ChannelArguments args);
std::shared_ptr<grpc::Channel> CreateGrpcChannel(const std::string& target, const TlsPem& tls);

}  // namespace moesplit::auth
