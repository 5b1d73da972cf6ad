// API keys of the dense service's public APIs (HTTP `Authorization: Bearer
// KEY`, gRPC `authorization: Bearer KEY` metadata): loading them and
// matching a presented key in constant time.
//
// Sources (moesplit-dense and `moesplit up`): `--api-key-file FILE` (one key
// per line; surrounding whitespace trimmed; blank lines and lines starting
// with '#' ignored) and the environment variable MOESPLIT_API_KEYS (keys
// separated by newlines or commas). Both given: the union. Neither: no keys,
// the APIs are open. Keys never come from the command line (it shows in
// `ps`). A key file that holds no key is an error (a typo must not switch
// authentication off); an empty MOESPLIT_API_KEYS counts as unset.
//
// Matching: ApiKeySet keeps only the SHA-256 digests of its keys and
// compares the presented key's digest with every one of them with
// CRYPTO_memcmp, without stopping at a match, so neither a key's content nor
// its length shows in the time taken.
//
// Thread-safe: ApiKeySet is immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moesplit::auth {

// The environment variable of the service's keys, and of a client's key.
inline constexpr char kApiKeysEnv[] = "MOESPLIT_API_KEYS";
inline constexpr char kClientApiKeyEnv[] = "MOESPLIT_API_KEY";

// The keys in `text`, in order, duplicates dropped. `separators` splits it
// ("\n" for a key file; "\n," for MOESPLIT_API_KEYS); each piece is trimmed
// of ASCII whitespace; empty pieces and pieces starting with '#' are
// skipped. InvalidArgument when a key holds a character outside printable
// ASCII (a key travels in an HTTP header) naming its line.
absl::StatusOr<std::vector<std::string>> ParseApiKeys(absl::string_view text,
                                                      absl::string_view separators);

// The keys of `file` (may be "": none) and of `env_value` (the value of
// MOESPLIT_API_KEYS, may be ""): their union. NotFound/PermissionDenied when
// the file cannot be read, InvalidArgument when it holds no key or a bad one
// (the message names the file).
absl::StatusOr<std::vector<std::string>> LoadApiKeys(const std::string& file,
                                                     absl::string_view env_value);

// A client's key: the first key of `file` when given, else `env_value` (the
// value of MOESPLIT_API_KEY) trimmed; "" = none.
absl::StatusOr<std::string> LoadClientApiKey(const std::string& file, absl::string_view env_value);

// The KEY of an "Authorization: Bearer KEY" value (scheme case-insensitive,
// whitespace around KEY trimmed); "" when the value is not of that form.
absl::string_view BearerToken(absl::string_view authorization);

class ApiKeySet {
 public:
  ApiKeySet() = default;
  explicit ApiKeySet(const std::vector<std::string>& keys);

  // No keys: authentication is off.
  bool empty() const { return digests_.empty(); }
  size_t size() const { return digests_.size(); }

  // Whether `key` is one of the set's keys (false for ""), in time that
  // depends only on the number of keys.
  bool Matches(absl::string_view key) const;
  // Matches(BearerToken(authorization)).
  bool MatchesAuthorization(absl::string_view authorization) const;

 private:
  using Digest = std::array<uint8_t, 32>;
  static Digest Sha256(absl::string_view data);
  std::vector<Digest> digests_;
};

}  // namespace moesplit::auth
