// InferenceService: the moesplit.v1.Inference gRPC service over a
// DenseEngine (callback API; thin handlers).
//
// Generate and Chat hold no thread while they run. Each call is a write
// reactor: the request is parsed, its prompt rendered and tokenized and it
// is submitted on a small set-up pool (kExecutorThreads threads); then its
// work runs on a strand of the service's executor (kExecutorThreads
// threads, whatever the number of calls): the engine pushes each step's
// output to the call (RequestHandle::Subscribe: the engine thread only
// posts to the strand), which turns the
// deltas into responses and writes them, one StartWrite in flight at a
// time (OnWriteDone starts the next; Finish once the request ended and
// everything is written). Backpressure: a client that reads slowly never
// slows the engine; its responses wait in the call (at most one per
// generated token, bounded by max_tokens or the context) until gRPC's flow
// control lets them out. A cancelled call (OnCancel, a failed write) or an
// expired deadline cancels the request in the engine, which drops the
// sequence and frees its KV cache at the next step; the call finishes
// CANCELLED once the engine confirmed the end.
// Every call is counted in moesplit_requests_total{api="grpc"}. With API
// keys (ServedModel::auth) a call without `authorization: Bearer KEY`
// metadata holding one is UNAUTHENTICATED before anything runs.
// List fields are bounded as in the HTTP API (request_limits.h: `stop`,
// `messages`); text the service sends is valid UTF-8, with the raw bytes
// beside it where a token may cut a character (inference.proto).
//
// Thread-safe. The service must outlive the grpc::Server it is registered
// with (shut the server down first); the destructor waits for the calls
// still open, then stops the executor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moesplit/v1/inference.grpc.pb.h"
#include "services/dense/api_auth.h"
#include "services/dense/chat_prompt.h"
#include "services/dense/dense_engine.h"

namespace moesplit::dense {

class Readiness;
class VolatileSystemFilter;

// Served-model facts shared by the gRPC and HTTP front ends.
struct ServedModel {
  DenseEngine* engine = nullptr;
  std::string name;  // the id responses carry: names[0], else default_name
  const ChatPrompt* chat = nullptr;
  const ApiAuth* auth = nullptr;  // null: no API keys, the APIs are open
  // --served-model-name: the names /v1/models lists (empty: default_name).
  std::vector<std::string> names;
  std::string default_name;  // general.name, else the file name without .gguf
  const Readiness* readiness = nullptr;  // null: always ready
  // Left out of system prompts before rendering (volatile_system.h); null: nothing.
  const VolatileSystemFilter* volatile_system = nullptr;
  // The Responses API's stored responses (responses_api.h): how many, how long.
  int64_t responses_stored = defaults::kResponsesStored;
  int64_t responses_ttl_s = defaults::kResponsesTtlSeconds;
  // OK when `requested` is empty, one of `names` or default_name (or
  // `name`); NotFound naming the served names otherwise.
  absl::Status CheckName(const std::string& requested) const;
  // The names /v1/models lists, the id first.
  std::vector<std::string> ListedNames() const;
};

// The served name of the model at `path`.
std::string ServedModelName(const model::Model& model, const std::string& path);

// A ServedModel's names from --served-model-name (comma-separated, "" =
// none; repeats dropped): sets names, default_name and name.
void SetServedNames(const std::string& default_name, const std::string& served_model_names,
                    ServedModel* served);

class InferenceService final : public moesplit::v1::Inference::CallbackService {
 public:
  explicit InferenceService(ServedModel served);
  ~InferenceService() override;

  // Threads of the executor the streaming calls run on (and of the pool
  // that prepares them).
  static constexpr int kExecutorThreads = 2;
  struct Executor;

  grpc::ServerWriteReactor<moesplit::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const moesplit::v1::GenerateRequest* request) override;
  grpc::ServerWriteReactor<moesplit::v1::ChatResponse>* Chat(
      grpc::CallbackServerContext* ctx, const moesplit::v1::ChatRequest* request) override;
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
  // OK, or UNAUTHENTICATED (counted) when keys are on and the call's
  // authorization metadata holds none of them.
  grpc::Status Authorize(grpc::CallbackServerContext* ctx) const;

  const ServedModel served_;
  const std::unique_ptr<Executor> executor_;
};

}  // namespace moesplit::dense
