#include "common/auth/tls.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::auth {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::string pem(std::istreambuf_iterator<char>(in), {});
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no PEM block"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<TlsPem> ReadTlsFiles(const std::string& cert_file, const std::string& key_file,
                                    const std::string& ca_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  TlsPem t;
  ASSIGN_OR_RETURN(t.cert, ReadPem(cert_file, "--tls-cert"));
  ASSIGN_OR_RETURN(t.key, ReadPem(key_file, "--tls-key"));
  ASSIGN_OR_RETURN(t.ca, ReadPem(ca_file, "--tls-ca"));
  return t;
}

const char* ServerTlsMode(const TlsPem& tls) {
  if (!tls.server_tls()) return "off";
  return tls.ca.empty() ? "on" : "mutual";
}

std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsPem& tls) {
  if (!tls.server_tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(
      tls.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls.ca;
  o.pem_key_cert_pairs.push_back({tls.key, tls.cert});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::Channel> CreateGrpcChannel(const std::string& target, const TlsPem& tls,
                                                 grpc::ChannelArguments args) {
  if (!tls.client_tls()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca;
  o.pem_private_key = tls.key;
  o.pem_cert_chain = tls.cert;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(o), args);
}

std::shared_ptr<grpc::Channel> CreateGrpcChannel(const std::string& target, const TlsPem& tls) {
  return CreateGrpcChannel(target, tls, grpc::ChannelArguments());
}

}  // namespace moesplit::auth
