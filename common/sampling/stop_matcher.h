// StopMatcher: finds OpenAI-style stop strings in a streamed, decoded text.
//
// The generation loop feeds each decoded text delta (e.g. StreamDecoder
// output) and emits what Feed() returns. Text is held back while it could
// still be the beginning of a stop string (the shortest suffix of the
// pending text that is a proper prefix of some stop string, and an
// incomplete UTF-8 sequence at the very end), so a stop string split across
// any number of deltas is still found and never half-emitted.
//
// Matching rule: the stop occurrence that ENDS first in the stream wins;
// among occurrences ending at the same byte, the longest (earliest start).
// The emitted text then ends right before that occurrence: the stop string
// and everything after it are dropped, as OpenAI does. Because this rule
// depends only on the whole text, every way of cutting the text into deltas
// gives the same concatenated output and the same matched stop string.
//
// Matching is on bytes. With valid UTF-8 input and stop strings, a match
// always lies on character boundaries, and every piece returned is valid
// UTF-8 even when deltas cut characters (the cut character is held back).
//
// Lifetime: after a match, or after Flush(), the matcher is finished: later
// Feed()s return nothing. Not thread-safe (one per sequence).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moesplit {

class StopMatcher {
 public:
  struct Result {
    std::string text;   // safe to emit now (may be empty)
    bool stopped = false;
    int stop_index = -1;  // index into stops() of the match when stopped
  };

  // InvalidArgument for an empty stop string. No stop strings is valid: the
  // matcher then only holds back incomplete trailing UTF-8.
  static absl::StatusOr<StopMatcher> Create(std::vector<std::string> stops);

  // Appends `delta` to the stream. Returns the text that can be emitted now
  // and whether a stop string has matched (then the text ends before it).
  Result Feed(std::string_view delta);

  // End of stream without a match: returns the held-back text. Empty after
  // a match.
  std::string Flush();

  bool stopped() const { return stop_index_ >= 0; }
  int stop_index() const { return stop_index_; }
  const std::vector<std::string>& stops() const { return stops_; }
  // Bytes currently held back.
  size_t pending_size() const { return pending_.size(); }

 private:
  explicit StopMatcher(std::vector<std::string> stops);

  // Earliest-ending (then longest) match in pending_ whose end lies past
  // `old_size`; false when none.
  bool FindMatch(size_t old_size, size_t* start, int* index) const;
  // Length of the prefix of pending_ that can be emitted.
  size_t SafePrefix() const;

  std::vector<std::string> stops_;
  size_t max_stop_size_ = 0;
  std::string pending_;
  int stop_index_ = -1;
  bool finished_ = false;
};

}  // namespace moesplit
