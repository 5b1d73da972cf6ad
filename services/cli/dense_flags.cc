#include "services/cli/dense_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/auth/api_keys.h"
#include "common/base/build_info.h"
#include "common/base/status.h"
#include "common/plan/byte_size.h"

namespace moesplit::cli {
namespace {

// One --experts value: shm://NAME or grpc://HOST:PORT, comma-separated.
absl::Status CheckExpertAddresses(absl::string_view value) {
  for (absl::string_view a : absl::StrSplit(value, absl::ByAnyChar(",|"), absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&a, "shm://")) {
      if (a.empty() || a.size() > 64 || !std::all_of(a.begin(), a.end(), [](char c) {
            return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                   c == '-';
          })) {
        return absl::InvalidArgumentError(
            absl::StrCat("shm name '", a, "' must be 1-64 characters of [A-Za-z0-9_.-]"));
      }
    } else if (absl::ConsumePrefix(&a, "grpc://")) {
      if (absl::Status s = CheckHostPort(a); !s.ok()) return s;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("'", a, "' is not shm://NAME or grpc://HOST:PORT"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReadable(absl::string_view path) {
  if (access(std::string(path).c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The key file parses and holds at least one key.
absl::Status CheckApiKeyFile(absl::string_view path) {
  RETURN_IF_ERROR(CheckReadable(path));
  return auth::LoadApiKeys(std::string(path), "").status();
}

absl::Status CheckByteSize(absl::string_view value) {
  auto bytes = plan::ParseByteSize(value);
  if (!bytes.ok()) return bytes.status();
  if (*bytes == 0) return absl::InvalidArgumentError("must be more than 0 bytes");
  return absl::OkStatus();
}

absl::Status CheckAutoOffOrCount(absl::string_view value) {
  return ParseAutoOffOrCount(value).status();
}

// The HTTP front end's deadlines and limits (http_server.h).
template <typename Want>
void AddHttpLimitFlags(FlagParser& p, DenseServiceFlags* f, const Want& want) {
  struct Ms {
    const char* name;
    int64_t* dst;
    const char* help;
  };
  for (const Ms& m : {
           Ms{"http-header-timeout", &f->http_header_timeout_ms,
              "ms an HTTP client may take to send a request's line and headers"},
           Ms{"http-body-timeout", &f->http_body_timeout_ms,
              "ms an HTTP client may take to send a request's body"},
           Ms{"http-idle-timeout", &f->http_idle_timeout_ms,
              "ms a kept-alive HTTP connection may wait between requests"},
           Ms{"http-write-timeout", &f->http_write_timeout_ms,
              "ms one HTTP response write may take (a client that stops reading is dropped)"},
       }) {
    if (want(m.name)) p.AddInt(m.name, m.dst, m.help).Range(1, 86400000).Meta("MS");
  }
  if (want("http-sse-heartbeat-ms")) {
    p.AddInt("http-sse-heartbeat-ms", &f->http_sse_heartbeat_ms,
             "ms a streamed HTTP response may stay silent (queued, prefilling) before an SSE "
             "comment line `: ping` keeps proxies from timing it out; 0: off")
        .Range(0, 86400000)
        .Meta("MS");
  }
  if (want("http-max-requests-per-connection")) {
    p.AddInt("http-max-requests-per-connection", &f->http_max_requests_per_connection,
             "requests served on one kept-alive HTTP connection")
        .Range(1, 1 << 30);
  }
  if (want("http-max-connections")) {
    p.AddInt("http-max-connections", &f->http_max_connections,
             "open HTTP connections; at the limit the longest-waiting one without a request "
             "makes room, else 503")
        .Range(1, 1 << 20);
  }
  if (want("max-body-bytes")) {
    p.AddString("max-body-bytes", &f->max_body_bytes, "largest HTTP request body (more: 413)")
        .Check(CheckByteSize)
        .Meta("SIZE");
  }
  if (want("http-max-header-bytes")) {
    p.AddInt("http-max-header-bytes", &f->http_max_header_bytes,
             "largest HTTP request line + headers (more: 431)")
        .Range(256, 1 << 24);
  }
  if (want("http-max-uri-bytes")) {
    p.AddInt("http-max-uri-bytes", &f->http_max_uri_bytes,
             "longest HTTP request target (more: 414; at most --http-max-header-bytes)")
        .Range(16, 1 << 24);
  }
}

// API keys and TLS (docs/operations.md "Security").
template <typename Want>
void AddSecurityFlags(FlagParser& p, DenseServiceFlags* f, const Want& want) {
  if (want("api-key-file")) {
    p.AddString("api-key-file", &f->api_key_file,
                "API keys, one per line (# comments): the HTTP API wants Authorization: Bearer "
                "KEY, the gRPC API authorization metadata; also $MOESPLIT_API_KEYS (newline or "
                "comma separated)")
        .Check(CheckApiKeyFile)
        .Meta("FILE")
        .DefaultText("$MOESPLIT_API_KEYS, else no authentication");
  }
  if (want("tls-cert")) {
    p.AddString("tls-cert", &f->tls_cert,
                "serve the HTTP and gRPC APIs over TLS with this certificate chain (PEM; with "
                "--tls-key); also the client certificate towards grpc:// workers")
        .Check(CheckReadable)
        .Meta("FILE")
        .DefaultText("off: plain text");
  }
  if (want("tls-key")) {
    p.AddString("tls-key", &f->tls_key, "the private key of --tls-cert (PEM)")
        .Check(CheckReadable)
        .Meta("FILE")
        .DefaultText("off");
  }
  if (want("tls-ca")) {
    p.AddString("tls-ca", &f->tls_ca,
                "reach grpc:// workers over TLS, their certificates signed by this CA (PEM), "
                "presenting --tls-cert (mutual TLS)")
        .Check(CheckReadable)
        .Meta("FILE")
        .DefaultText("off: plain text to workers");
  }
  if (want("tls-server-name")) {
    p.AddString("tls-server-name", &f->tls_server_name,
                "the name checked in workers' certificates, for workers addressed by IP")
        .Meta("NAME")
        .DefaultText("the host of each grpc:// address");
  }
}

// A --served-model-name value: names of printable ASCII without ','.
absl::Status CheckModelNames(absl::string_view value) {
  for (absl::string_view n : absl::StrSplit(value, ',')) {
    if (n.empty() || n.size() > 256 ||
        !std::all_of(n.begin(), n.end(), [](char c) { return c > ' ' && c < 0x7f; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model name '", n, "' must be 1-256 printable ASCII characters without spaces"));
    }
  }
  return absl::OkStatus();
}

// A --cors-origin value: "*" or scheme://host[:port].
absl::Status CheckCorsOrigins(absl::string_view value) {
  for (absl::string_view o : absl::StrSplit(value, ',')) {
    const size_t scheme = o.find("://");
    if (o != "*" && (scheme == absl::string_view::npos || scheme == 0 ||
                     scheme + 3 >= o.size() || o.back() == '/' ||
                     o.find_first_of(" \t\r\n") != absl::string_view::npos)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", o, "' is not an origin (scheme://host[:port], no path) or *"));
    }
  }
  return absl::OkStatus();
}

// Shutdown, logs, names clients may use, browsers.
template <typename Want>
void AddOperationFlags(FlagParser& p, DenseServiceFlags* f, const Want& want) {
  if (want("drain-timeout")) {
    p.AddInt("drain-timeout", &f->drain_timeout_ms,
             "ms that in-flight requests may take to finish after SIGTERM/SIGINT (readiness "
             "is off at once, new requests are refused); then they are cancelled")
        .Range(0, 86400000)
        .Meta("MS");
  }
  if (want("log-format")) {
    p.AddString("log-format", &f->log_format,
                "stderr log lines (start-up and one per request): text or json")
        .OneOf({"text", "json"});
  }
  if (want("served-model-name")) {
    p.AddString("served-model-name", &f->served_model_name,
                "model names clients may send (comma-separated or repeated); the first is the "
                "id /v1/models reports")
        .Repeatable()
        .Check(CheckModelNames)
        .Meta("NAME")
        .DefaultText("the model's general.name, else its file name");
  }
  if (want("cors-origin")) {
    p.AddString("cors-origin", &f->cors_origin,
                "browser origins allowed to call the HTTP API (CORS; repeatable; * for any; "
                "scheme://host without a port admits that host on any port)")
        .Repeatable()
        .Check(CheckCorsOrigins)
        .Meta("ORIGIN")
        .DefaultText("off");
  }
  if (want("volatile-system-pattern")) {
    p.AddString("volatile-system-pattern", &f->volatile_system_pattern,
                "PCRE2 pattern: what it matches in system messages is left out of the prompt, "
                "so that text that changes on every request does not defeat the prefix cache "
                "(several: a|b; \"\" = off)")
        .Meta("REGEX")
        .DefaultText("Claude Code's x-anthropic-billing-header fields");
  }
}

}  // namespace

absl::Status CheckDenseServiceFlags(const DenseServiceFlags& f) {
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!f.tls_server_name.empty() && f.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-server-name applies to TLS towards workers: give --tls-ca too");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseAutoOffOrCount(absl::string_view value) {
  if (value == "auto") return -1;
  if (value == "off") return 0;
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be auto, off or a positive number, got '", value, "'"));
  }
  return n;
}

void AddDenseServiceFlags(FlagParser& p, DenseServiceFlags* f, const FlagNames& except) {
  auto want = [&](const char* name) { return !except.contains(name); };
  if (want("model")) {
    p.AddString("model", &f->model, "GGUF model file (the first part of a split model)")
        .Required()
        .Meta("PATH");
  }
  if (want("experts")) {
    p.AddString("experts", &f->experts,
                "expert-workers: shm://NAME or grpc://HOST:PORT, comma-separated or repeated; "
                "replicas of one shard as ADDR|ADDR (workers serving the same shard are "
                "its replicas either way)")
        .Repeatable()
        .Check(CheckExpertAddresses)
        .Meta("ADDRS")
        .DefaultText("the routed experts computed in-process");
  }
  if (want("grpc")) p.AddString("grpc", &f->grpc, "address of the Inference gRPC API").HostPort();
  if (want("http")) {
    p.AddString("http", &f->http, "also serve the OpenAI-compatible HTTP API at this address")
        .HostPort()
        .DefaultText("off");
  }
  if (want("metrics")) {
    p.AddString("metrics", &f->metrics, "serve Prometheus /metrics at this address")
        .HostPort()
        .DefaultText("off");
  }
  if (want("chat-template-file")) {
    p.AddString("chat-template-file", &f->chat_template_file,
                "Jinja chat template to use instead of the model's")
        .Check(CheckReadable)
        .Meta("PATH")
        .DefaultText("the model's");
  }
  if (want("parallel")) {
    p.AddInt("parallel", &f->parallel,
             "sequences generated at once (continuous batching; one KV cache of --ctx each)")
        .Range(1, 1024);
  }
  if (want("max-queue")) {
    p.AddInt("max-queue", &f->max_queue,
             "requests that may wait for a slot; more get HTTP 429 / RESOURCE_EXHAUSTED")
        .Range(0, 100000);
  }
  if (want("responses-store")) {
    p.AddInt("responses-store", &f->responses_store,
             "Responses API responses kept in memory for previous_response_id and GET "
             "/v1/responses/{id} (the oldest goes first; 0: none)")
        .Range(0, 1000000)
        .Meta("N");
  }
  if (want("responses-ttl")) {
    p.AddInt("responses-ttl", &f->responses_ttl, "seconds a stored Responses API response is kept")
        .Range(1, 365LL * 24 * 3600)
        .Meta("SECONDS");
  }
  if (want("step-tokens")) {
    p.AddInt("step-tokens", &f->step_tokens, "tokens per forward step (decodes + prompt chunks)")
        .Range(1, 1 << 20);
  }
  if (want("threads")) {
    p.AddInt("threads", &f->threads,
             "CPU threads of the dense part; 0: every CPU the process may use (affinity mask, "
             "cgroup quota)")
        .Range(0, 1024);
  }
  if (want("ctx")) {
    p.AddInt("ctx", &f->ctx, "context positions per sequence (at most the model's)")
        .Range(16, 1 << 24);
  }
  if (want("expert-timeout")) {
    p.AddInt("expert-timeout", &f->expert_timeout_ms, "ms before an unanswered expert call fails")
        .Range(1, 86400000)
        .Meta("MS");
  }
  if (want("connect-timeout")) {
    p.AddInt("connect-timeout", &f->connect_timeout_ms, "ms to wait for the workers at start")
        .Range(0, 86400000)
        .Meta("MS");
  }
  if (want("backend")) {
    p.AddString("backend", &f->backend,
                "dense forward on: auto (the GPU when there is one), cpu, cuda")
        .OneOf({"auto", "cpu", "cuda"});
  }
  if (want("gpu-memory")) {
    p.AddString("gpu-memory", &f->gpu_memory, "GPU memory budget, e.g. 8GiB, 7.5G, 8000MiB")
        .Check(CheckByteSize)
        .Meta("SIZE")
        .DefaultText("the GPU's free memory");
  }
  if (want("kv-type")) {
    p.AddString("kv-type", &f->kv_type, "GPU KV cache element type").OneOf({"f16", "q8_0", "q4_0"});
  }
  if (want("expert-cache")) {
    p.AddString("expert-cache", &f->expert_cache,
                "GPU hot-expert cache slots: auto (what the budget leaves), off, or a number")
        .Check(CheckAutoOffOrCount)
        .Meta("auto|off|N");
  }
  if (want("prefill-stream")) {
    p.AddString("prefill-stream", &f->prefill_stream,
                "tokens an expert needs in a step to be streamed to the GPU for prefill: auto "
                "(measured at start-up), off, or a number")
        .Check(CheckAutoOffOrCount)
        .Meta("auto|off|N");
  }
  if (want("pin-experts")) {
    p.AddBool("pin-experts", &f->pin_experts,
              "page-lock the model's expert tensors for faster host-to-GPU copies");
  }
  if (want("prefix-cache")) {
    p.AddString("prefix-cache", &f->prefix_cache,
                "reuse the state of prompt prefixes seen before (blocks of 64 tokens)")
        .OneOf({"on", "off"});
  }
  if (want("cache-device")) {
    p.AddString("cache-device", &f->cache_device,
                "prefix cache device-memory tier on the GPU, in front of the primary tier and "
                "planned in --gpu-memory (taken from the expert cache); 0 = none")
        .Check([](absl::string_view v) { return plan::ParseByteSize(v).status(); })
        .Meta("SIZE");
  }
  if (want("cache-memory")) {
    p.AddString("cache-memory", &f->cache_memory,
                "prefix cache primary tier budget, e.g. 2GiB")
        .Check(CheckByteSize)
        .Meta("SIZE")
        .DefaultText("the sequence slots' state at the full context");
  }
  if (want("cache-ram")) {
    p.AddString("cache-ram", &f->cache_ram,
                "prefix cache host-RAM tier for blocks evicted from the primary tier; 0 = none")
        .Check([](absl::string_view v) { return plan::ParseByteSize(v).status(); })
        .Meta("SIZE");
  }
  AddHttpLimitFlags(p, f, want);
  AddSecurityFlags(p, f, want);
  AddOperationFlags(p, f, want);
}

absl::StatusOr<ParsedCommandLine> ParseDenseServiceFlags(const std::vector<std::string>& args,
                                                         DenseServiceFlags* f) {
  FlagParser p;
  AddDenseServiceFlags(p, f);
  p.SetVersionLine(VersionLine("moesplit-dense"));
  ASSIGN_OR_RETURN(const ParsedCommandLine r, ParseCommandLine(p, args, kDenseSynopsis));
  if (r == ParsedCommandLine::kRun && !p.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", p.positional()[0], "' (flags start with --)"));
  }
  if (r == ParsedCommandLine::kRun) RETURN_IF_ERROR(CheckDenseServiceFlags(*f));
  return r;
}

}  // namespace moesplit::cli
