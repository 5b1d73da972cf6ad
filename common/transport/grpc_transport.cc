#include "common/transport/grpc_transport.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth/tls.h"
#include "common/base/status.h"
#include "common/transport/describe_codec.h"
#include "common/transport/grpc_status.h"
#include "moesplit/v1/expert.grpc.pb.h"

namespace moesplit::transport {
namespace {

constexpr char kIdentityHeader[] = "moesplit-model-identity";
constexpr int kMaxMessageBytes = 256 << 20;

// Decodes a proto call into the domain type. Hidden states travel as f32
// (bit-identical results on every transport); another dtype is refused.
// A view of `p`'s call: its routing as the message holds it, its hidden
// state in place when the bytes are 4-aligned (else copied into *copy).
absl::Status CallFromProto(const v1::ExpertCall& p, std::vector<float>* copy,
                           model::ExpertCallView* call) {
  if (p.dtype() != v1::HIDDEN_DTYPE_F32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "call %d: hidden dtype %d; this worker takes f32 hidden states only", p.call_id(),
        static_cast<int>(p.dtype())));
  }
  const size_t n = static_cast<size_t>(std::max(0, p.n_tokens())) * std::max(0, p.d());
  if (p.n_tokens() < 0 || p.d() <= 0 || p.hidden().size() != n * 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "call %d: hidden holds %d bytes, n_tokens %d x d %d needs %d", p.call_id(),
        p.hidden().size(), p.n_tokens(), p.d(), n * 4));
  }
  call->call_id = p.call_id();
  call->layer = p.layer();
  call->n_tokens = p.n_tokens();
  call->d = p.d();
  const char* bytes = p.hidden().data();
  if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    call->hidden = absl::MakeConstSpan(reinterpret_cast<const float*>(bytes), n);
  } else {
    copy->resize(n);
    std::memcpy(copy->data(), bytes, 4 * n);
    call->hidden = *copy;
  }
  call->token_offsets = absl::MakeConstSpan(p.token_offsets().data(), p.token_offsets().size());
  call->expert_ids = absl::MakeConstSpan(p.expert_ids().data(), p.expert_ids().size());
  call->weights = absl::MakeConstSpan(p.weights().data(), p.weights().size());
  return absl::OkStatus();
}

void CallToProto(const model::ExpertCallView& c, v1::ExpertCall* p) {
  p->set_call_id(c.call_id);
  p->set_layer(c.layer);
  p->set_n_tokens(c.n_tokens);
  p->set_d(c.d);
  p->set_dtype(v1::HIDDEN_DTYPE_F32);
  p->set_hidden(c.hidden.data(), 4 * c.hidden.size());
  *p->mutable_token_offsets() = {c.token_offsets.begin(), c.token_offsets.end()};
  *p->mutable_expert_ids() = {c.expert_ids.begin(), c.expert_ids.end()};
  *p->mutable_weights() = {c.weights.begin(), c.weights.end()};
}

// A fixed set of threads running posted tasks in order of arrival.
class Executor {
 public:
  explicit Executor(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Executor() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

// ------------------------------------------------------------------ server

class GrpcExpertServer::Service final : public v1::ExpertWorker::CallbackService {
 public:
  Service(const WorkerDescription& d, model::ExpertBackend* backend, int threads,
          CallObserver* observer)
      : identity_(d.model_identity),
        max_tokens_(d.max_tokens),
        backend_(backend),
        observer_(observer),
        executor_(threads) {
    ToProto(d, &describe_);
  }

  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* ctx,
                                     const v1::DescribeRequest*,
                                     v1::DescribeResponse* response) override {
    *response = describe_;
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerBidiReactor<v1::ExpertCall, v1::ExpertResult>* Compute(
      grpc::CallbackServerContext* ctx) override {
    return new ComputeReactor(this, ctx);
  }

 private:
  class ComputeReactor final : public grpc::ServerBidiReactor<v1::ExpertCall, v1::ExpertResult> {
   public:
    ComputeReactor(Service* s, grpc::CallbackServerContext* ctx) : s_(s) {
      const auto& md = ctx->client_metadata();
      auto it = md.find(kIdentityHeader);
      const std::string identity =
          it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
      if (!s_->identity_.empty() && identity != s_->identity_) {
        const std::string msg = absl::StrCat(
            "model identity mismatch: the dense service runs model '", identity,
            "', this worker serves model ", s_->identity_);
        std::fprintf(stderr, "moesplit-expert-worker: refused a Compute stream: %s\n", msg.c_str());
        Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, msg));
        return;
      }
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      s_->executor_.Post([this] { RunCall(); });
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
        return;
      }
      StartRead(&request_);
    }
    void OnDone() override { delete this; }

   private:
    void RunCall() {
      const auto start = std::chrono::steady_clock::now();
      model::ExpertCallView call;
      absl::Status status = CallFromProto(request_, &hidden_copy_, &call);
      if (status.ok()) status = CheckCallTokens(call, s_->max_tokens_);
      response_.Clear();
      if (status.ok()) {
        // Computed straight into the response's bytes when they are aligned.
        std::string* out = response_.mutable_partial();
        out->resize(4 * call.hidden.size());
        float* dst = reinterpret_cast<uintptr_t>(out->data()) % alignof(float) == 0
                         ? reinterpret_cast<float*>(out->data())
                         : nullptr;
        if (dst == nullptr) partial_copy_.resize(call.hidden.size());
        uint64_t worker_ns = 0;
        status = s_->backend_->ComputeInto(call, dst != nullptr ? dst : partial_copy_.data(),
                                           &worker_ns);
        if (status.ok() && dst == nullptr) {
          std::memcpy(out->data(), partial_copy_.data(), out->size());
        }
      }
      response_.set_call_id(request_.call_id());
      response_.set_code(static_cast<int>(status.code()));
      if (!status.ok()) {
        response_.clear_partial();
        response_.set_message(std::string(status.message()));
      }
      response_.set_worker_ns(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                               start)
              .count()));
      if (s_->observer_ != nullptr) {
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        s_->observer_->OnCall("grpc", call, request_.ByteSizeLong(), response_.ByteSizeLong(),
                              secs, status);
      }
      StartWrite(&response_);
    }
    Service* s_;
    v1::ExpertCall request_;
    v1::ExpertResult response_;
    // Only when the message's bytes are not 4-aligned.
    std::vector<float> hidden_copy_, partial_copy_;
  };

  const std::string identity_;
  const int max_tokens_;  // Describe's max_tokens; 0: no limit
  model::ExpertBackend* const backend_;
  CallObserver* const observer_;
  v1::DescribeResponse describe_;
  Executor executor_;
};

absl::StatusOr<std::unique_ptr<GrpcExpertServer>> GrpcExpertServer::Start(
    const GrpcServerOptions& options, const WorkerDescription& description,
    model::ExpertBackend* backend) {
  std::unique_ptr<GrpcExpertServer> server(new GrpcExpertServer());
  server->service_ = std::make_unique<Service>(description, backend,
                                               std::max(1, options.executor_threads),
                                               options.observer);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, auth::GrpcServerCredentials(options.tls),
                           &server->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options.listen, " (address in use or invalid)"));
  }
  const auto colon = options.listen.rfind(':');
  server->address_ = absl::StrCat("grpc://", options.listen.substr(0, colon), ":", server->port_);
  return server;
}

GrpcExpertServer::~GrpcExpertServer() { Shutdown(); }

void GrpcExpertServer::Shutdown() {
  if (stopped_ || server_ == nullptr) return;
  stopped_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

// ------------------------------------------------------------------ client

namespace {

class GrpcExpertClient final : public ExpertClient {
 public:
  GrpcExpertClient(std::string target, ClientOptions options)
      : target_(std::move(target)), address_("grpc://" + target_), options_(std::move(options)),
        backoff_(options_) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    args.SetMaxSendMessageSize(kMaxMessageBytes);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    channel_ = auth::CreateGrpcChannel(target_, options_.tls, args);
    stub_ = v1::ExpertWorker::NewStub(channel_);
    watchdog_ = std::thread([this] { WatchdogLoop(); });
  }
  ~GrpcExpertClient() override {
    Disconnect();
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_watchdog_ = true;
    }
    watchdog_cv_.notify_all();
    watchdog_.join();
  }

  absl::StatusOr<uint64_t> Submit(const model::ExpertCallView& call) override;
  absl::Status Wait(uint64_t ticket, float* partial, size_t n, uint64_t* worker_ns) override;
  absl::StatusOr<WorkerDescription> Describe() override {
    RETURN_IF_ERROR(EnsureConnected());
    return description_;
  }
  const std::string& address() const override { return address_; }
  bool healthy() const override { return backoff_.healthy(); }
  TransportCounters counters() const override { return counters_.Snapshot(); }
  absl::Status Probe() override;

 private:
  absl::Status EnsureConnected();
  absl::Status Connect();
  absl::Status Fail(absl::Status status);
  void Disconnect();
  // Cancels the stream when a Wait outlives its deadline (the Read itself
  // runs on the caller's thread: no hand-off on the hot path).
  void WatchdogLoop();

  const std::string target_;
  const std::string address_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExpertWorker::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ExpertCall, v1::ExpertResult>> stream_;
  WorkerDescription description_;
  ReconnectBackoff backoff_;
  AtomicTransportCounters counters_;
  uint64_t next_ticket_ = 0;
  uint64_t next_result_ = 0;
  bool stream_broken_ = false;
  v1::ExpertCall request_;  // reused: no allocation growth per call
  v1::ExpertResult response_;

  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable watchdog_cv_;
  // Deadline of the Wait in progress (0: none); set by the caller.
  std::atomic<int64_t> deadline_ns_{0};
  std::atomic<bool> timed_out_{false};
  bool stop_watchdog_ = false;  // guarded by mu_
};

absl::Status GrpcExpertClient::EnsureConnected() {
  if (stream_ != nullptr && !stream_broken_) return absl::OkStatus();
  if (stream_ != nullptr) {
    // The stream broke: reconnect now (a worker that came back serves this
    // call; readiness already says it is back).
    Disconnect();
    ++counters_.failures;
  }
  RETURN_IF_ERROR(backoff_.MayAttempt());
  absl::Status s = Connect();
  if (!s.ok()) return Fail(s);
  backoff_.Succeeded();
  return absl::OkStatus();
}

// A unary Describe with a 1 s deadline on the shared channel (the stub is
// thread-safe; the Compute stream is left alone).
absl::Status GrpcExpertClient::Probe() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::DescribeResponse resp;
  grpc::Status s = stub_->Describe(&ctx, v1::DescribeRequest(), &resp);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_,
                                               " is unreachable: ", s.error_message()));
  }
  RETURN_IF_ERROR(CheckIdentity(address_, FromProto(resp), options_.model_identity));
  backoff_.PeerSeen();
  return absl::OkStatus();
}

absl::Status GrpcExpertClient::Connect() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::DescribeResponse resp;
  grpc::Status s = stub_->Describe(&ctx, v1::DescribeRequest(), &resp);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "expert worker ", address_, " is unreachable: ", s.error_message(),
        options_.tls.client_tls()
            ? " (TLS: the worker's certificate must chain to --tls-ca and name the address or "
              "--tls-server-name; a worker with --tls-ca needs this service's --tls-cert/"
              "--tls-key signed by its CA)"
            : ""));
  }
  WorkerDescription desc = FromProto(resp);
  RETURN_IF_ERROR(CheckIdentity(address_, desc, options_.model_identity));
  RETURN_IF_ERROR(CheckExpertFfn(address_, desc, options_.expert_ffn));
  {
    std::lock_guard<std::mutex> l(mu_);
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->AddMetadata(kIdentityHeader, options_.model_identity);
  }
  stream_ = stub_->Compute(ctx_.get());
  stream_broken_ = false;
  next_ticket_ = next_result_ = 0;
  description_ = std::move(desc);
  return absl::OkStatus();
}

void GrpcExpertClient::WatchdogLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_watchdog_) {
    watchdog_cv_.wait_for(l, std::chrono::milliseconds(5));
    const int64_t deadline = deadline_ns_.load();
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (deadline != 0 && now > deadline && ctx_ != nullptr && !timed_out_.exchange(true)) {
      ctx_->TryCancel();
    }
  }
}

absl::Status GrpcExpertClient::Fail(absl::Status status) {
  Disconnect();
  ++counters_.failures;
  return backoff_.Failed(std::move(status));
}

void GrpcExpertClient::Disconnect() {
  if (stream_ == nullptr) return;
  std::lock_guard<std::mutex> l(mu_);
  ctx_->TryCancel();
  stream_->Finish();
  stream_.reset();
  ctx_.reset();
}

absl::StatusOr<uint64_t> GrpcExpertClient::Submit(const model::ExpertCallView& call) {
  RETURN_IF_ERROR(EnsureConnected());
  if (next_ticket_ - next_result_ >= static_cast<uint64_t>(kMaxInFlight)) {
    return absl::FailedPreconditionError(
        absl::StrCat("more than ", kMaxInFlight, " calls in flight on ", address_));
  }
  request_.Clear();
  CallToProto(call, &request_);
  if (!stream_->Write(request_)) {
    return Fail(absl::UnavailableError(
        absl::StrCat("expert worker ", address_, ": the stream broke while sending")));
  }
  ++counters_.calls;
  counters_.bytes_sent += request_.ByteSizeLong();
  return next_ticket_++;
}

absl::Status GrpcExpertClient::Wait(uint64_t ticket, float* partial, size_t n,
                                    uint64_t* worker_ns) {
  if (stream_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_, " connection lost"));
  }
  if (ticket != next_result_) {
    return absl::FailedPreconditionError("expert results must be collected in call order");
  }
  timed_out_ = false;
  deadline_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     (std::chrono::steady_clock::now() + options_.timeout).time_since_epoch())
                     .count();
  const bool ok = stream_->Read(&response_);
  deadline_ns_ = 0;
  if (!ok) {
    stream_broken_ = true;
    if (timed_out_) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "expert worker ", address_, " did not answer within ", options_.timeout.count(),
          " ms")));
    }
    const grpc::Status s = stream_->Finish();
    stream_.reset();
    {
      std::lock_guard<std::mutex> l(mu_);
      ctx_.reset();
    }
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "expert worker ", address_, " refused the connection: ", s.error_message())));
    }
    return Fail(absl::UnavailableError(
        absl::StrCat("expert worker ", address_, " closed the stream: ", s.error_message())));
  }
  ++next_result_;
  counters_.bytes_received += response_.ByteSizeLong();
  if (response_.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(response_.code()),
                        absl::StrCat(address_, ": ", response_.message()));
  }
  if (response_.partial().size() != 4 * n) {
    return absl::InternalError(absl::StrCat(address_, ": call ", response_.call_id(),
                                            " answered ", response_.partial().size() / 4,
                                            " values, ", n, " expected"));
  }
  if (worker_ns != nullptr) *worker_ns = response_.worker_ns();
  std::memcpy(partial, response_.partial().data(), 4 * n);
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<ExpertClient> NewGrpcExpertClient(const std::string& target,
                                                  const ClientOptions& options) {
  return std::make_unique<GrpcExpertClient>(target, options);
}

}  // namespace moesplit::transport
