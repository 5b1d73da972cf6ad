#include "common/base/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"

namespace moesplit {

LoadProgress::LoadProgress(std::string prefix, uint64_t total_bytes, FILE* out)
    : LoadProgress(std::move(prefix), total_bytes, out, isatty(fileno(out)) == 1) {}

LoadProgress::LoadProgress(std::string prefix, uint64_t total_bytes, FILE* out, bool terminal)
    : prefix_(std::move(prefix)),
      total_(std::max<uint64_t>(total_bytes, 1)),
      out_(out),
      terminal_(terminal),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

std::string LoadProgress::ProgressText(uint64_t done, uint64_t total, double seconds) {
  const double gb = done / 1e9;
  return absl::StrFormat("%3d%% %.2f of %.2f GB, %.2f GB/s",
                         static_cast<int>(100.0 * std::min(done, total) / std::max<uint64_t>(total, 1)),
                         gb, total / 1e9, seconds > 0 ? gb / seconds : 0.0);
}

std::string LoadProgress::FinalText(uint64_t total, double seconds) {
  return absl::StrFormat("%.2f GB in %.1f s (%.2f GB/s)", total / 1e9, seconds,
                         seconds > 0 ? total / 1e9 / seconds : 0.0);
}

void LoadProgress::Add(uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (finished_) return;
  done_ += bytes;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - start_).count();
  const int decile = static_cast<int>(10 * std::min(done_, total_) / total_);
  if (terminal_) {
    if (now - last_print_ < std::chrono::milliseconds(100) && done_ < total_) return;
    std::fprintf(out_, "\r%s: %s\x1b[K", prefix_.c_str(), ProgressText(done_, total_, secs).c_str());
  } else {
    if (decile <= last_decile_ && now - last_print_ < std::chrono::seconds(5)) return;
    if (done_ >= total_) return;  // Finish prints the last line
    std::fprintf(out_, "%s: %s\n", prefix_.c_str(), ProgressText(done_, total_, secs).c_str());
  }
  last_decile_ = std::max(last_decile_, decile);
  last_print_ = now;
  std::fflush(out_);
}

double LoadProgress::Finish() {
  std::lock_guard<std::mutex> l(mu_);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (finished_) return secs;
  finished_ = true;
  std::fprintf(out_, "%s%s: %s\n", terminal_ ? "\r\x1b[K" : "", prefix_.c_str(),
               FinalText(total_, secs).c_str());
  std::fflush(out_);
  return secs;
}

}  // namespace moesplit
