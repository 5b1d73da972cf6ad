#include "services/dense/request_log.h"

#include "absl/strings/ascii.h"
#include "common/base/log.h"

namespace moesplit::dense {
namespace {

double Ms(double seconds) { return seconds * 1000.0; }

}  // namespace

std::string RequestOutcome(const absl::Status& status) {
  if (status.ok()) return "ok";
  if (auto code = status.GetPayload(kErrorCodePayload)) return std::string(*code);
  if (status.code() == absl::StatusCode::kCancelled) return "cancelled";
  return absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
}

std::vector<LogField> RequestLogFields(const RequestRecord& r) {
  const RequestTimings& t = r.timings;
  return {{"id", r.id},
          {"api", r.api},
          {"endpoint", r.endpoint},
          {"model", r.model},
          {"prompt_tokens", t.prompt_tokens},
          {"cached_tokens", t.cached_tokens},
          {"generated_tokens", t.generated_tokens},
          {"ttft_ms", t.ttft_s < 0 ? -1.0 : Ms(t.ttft_s)},
          {"tokens_per_s", t.decode_tokens_per_s()},
          {"duration_ms", Ms(t.duration_s)},
          {"outcome", r.outcome},
          {"finish_reason", r.finish_reason}};
}

void LogRequest(const RequestRecord& r) {
  Log(r.outcome == "ok" || r.outcome == "cancelled" ? LogLevel::kInfo : LogLevel::kWarning,
      "moesplit-dense", "request", RequestLogFields(r));
}

nlohmann::ordered_json LlamaTimings(const RequestTimings& t) {
  const double prompt_ms = t.ttft_s < 0 ? Ms(t.duration_s) : Ms(t.ttft_s);
  const double predicted_ms = Ms(t.decode_s);
  return {{"cache_n", t.cached_tokens},
          {"prompt_n", t.prompt_tokens},
          {"prompt_ms", prompt_ms},
          {"prompt_per_second", prompt_ms > 0 ? t.prompt_tokens * 1000.0 / prompt_ms : 0.0},
          {"predicted_n", t.generated_tokens},
          {"predicted_ms", predicted_ms},
          {"predicted_per_second", t.decode_tokens_per_s()}};
}

}  // namespace moesplit::dense
