// InferenceService: the moesplit.v1.Inference gRPC service over a
// DenseEngine (callback API; thin handlers).
//
// Generate runs on a worker thread of its own, never inside a reaction; its
// deltas are written in order through the reactor, and a cancelled call or
// an expired deadline stops the generation at the next token.
#pragma once

#include <memory>

#include "moesplit/v1/inference.grpc.pb.h"
#include "services/dense/dense_engine.h"

namespace moesplit::dense {

class InferenceService final : public moesplit::v1::Inference::CallbackService {
 public:
  explicit InferenceService(DenseEngine* engine) : engine_(engine) {}
  ~InferenceService() override;

  grpc::ServerWriteReactor<moesplit::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const moesplit::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const moesplit::v1::TokenizeRequest* request,
                                     moesplit::v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const moesplit::v1::DetokenizeRequest* request,
                                       moesplit::v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* ctx,
                                     const moesplit::v1::GetModelRequest* request,
                                     moesplit::v1::GetModelResponse* response) override;

 private:
  class GenerateReactor;
  DenseEngine* const engine_;
};

}  // namespace moesplit::dense
