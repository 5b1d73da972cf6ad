#include "common/sampling/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moesplit {
namespace {

// Start of an incomplete UTF-8 sequence at the end of `s`, or s.size().
size_t IncompleteUtf8Tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? n - back : n;
  }
  return n;  // only continuation bytes (invalid): nothing to wait for
}

}  // namespace

absl::StatusOr<StopMatcher> StopMatcher::Create(std::vector<std::string> stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop string ", i, " is empty"));
    }
  }
  return StopMatcher(std::move(stops));
}

StopMatcher::StopMatcher(std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    max_stop_size_ = std::max(max_stop_size_, s.size());
  }
}

bool StopMatcher::FindMatch(size_t old_size, size_t* start, int* index) const {
  size_t best_end = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    // pending_[0, old_size) held no match, so a new one ends past old_size.
    const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
    const size_t pos = pending_.find(s, from);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (best_end == std::string::npos || end < best_end ||
        (end == best_end && pos < *start)) {
      best_end = end;
      *start = pos;
      *index = static_cast<int>(i);
    }
  }
  return best_end != std::string::npos;
}

size_t StopMatcher::SafePrefix() const {
  const size_t n = pending_.size();
  size_t hold = n;
  // Shortest-start first: the earliest i whose suffix begins some stop.
  const size_t first = n >= max_stop_size_ ? n - max_stop_size_ + 1 : 0;
  for (size_t i = first; i < n && hold == n; ++i) {
    const std::string_view suffix = std::string_view(pending_).substr(i);
    for (const std::string& s : stops_) {
      if (s.size() > suffix.size() && s.compare(0, suffix.size(), suffix) == 0) {
        hold = i;
        break;
      }
    }
  }
  return std::min(hold, IncompleteUtf8Tail(pending_));
}

StopMatcher::Result StopMatcher::Feed(std::string_view delta) {
  Result result;
  result.stopped = stopped();
  result.stop_index = stop_index_;
  if (finished_) return result;
  const size_t old_size = pending_.size();
  pending_.append(delta);
  size_t start = 0;
  int index = -1;
  if (FindMatch(old_size, &start, &index)) {
    result.text = pending_.substr(0, start);
    result.stopped = true;
    result.stop_index = index;
    stop_index_ = index;
    finished_ = true;
    pending_.clear();
    return result;
  }
  const size_t safe = SafePrefix();
  result.text = pending_.substr(0, safe);
  pending_.erase(0, safe);
  return result;
}

std::string StopMatcher::Flush() {
  finished_ = true;
  return std::exchange(pending_, std::string());
}

}  // namespace moesplit
