#include "common/auth/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"

namespace moesplit::auth {
namespace {

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the API key file ", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseApiKeys(absl::string_view text,
                                                      absl::string_view separators) {
  std::vector<std::string> keys;
  int line = 0;
  for (absl::string_view piece : absl::StrSplit(text, absl::ByAnyChar(separators))) {
    ++line;
    piece = absl::StripAsciiWhitespace(piece);
    if (piece.empty() || piece[0] == '#') continue;
    for (char c : piece) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat("the API key ", separators == "\n" ? "on line " : "", line,
                         " holds a character that is not printable ASCII (0x",
                         absl::Hex(static_cast<unsigned char>(c)), ")"));
      }
    }
    if (std::find(keys.begin(), keys.end(), piece) == keys.end()) keys.emplace_back(piece);
  }
  return keys;
}

absl::StatusOr<std::vector<std::string>> LoadApiKeys(const std::string& file,
                                                     absl::string_view env_value) {
  std::vector<std::string> keys;
  if (!file.empty()) {
    ASSIGN_OR_RETURN(const std::string text, ReadKeyFile(file));
    auto parsed = ParseApiKeys(text, "\n");
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", parsed.status().message()));
    }
    if (parsed->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the API key file ", file, " holds no key (one per line; # starts a comment)"));
    }
    keys = std::move(*parsed);
  }
  auto from_env = ParseApiKeys(env_value, "\n,");
  if (!from_env.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kApiKeysEnv, ": ", from_env.status().message()));
  }
  for (std::string& k : *from_env) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  return keys;
}

absl::StatusOr<std::string> LoadClientApiKey(const std::string& file, absl::string_view env_value) {
  if (file.empty()) return std::string(absl::StripAsciiWhitespace(env_value));
  ASSIGN_OR_RETURN(const std::vector<std::string> keys, LoadApiKeys(file, ""));
  return keys.front();
}

absl::string_view BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::StartsWithIgnoreCase(authorization, kScheme) ||
      !absl::ascii_isspace(static_cast<unsigned char>(authorization[kScheme.size()]))) {
    return {};
  }
  return absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
}

ApiKeySet::ApiKeySet(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (!k.empty()) digests_.push_back(Sha256(k));
  }
}

ApiKeySet::Digest ApiKeySet::Sha256(absl::string_view data) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return d;
}

bool ApiKeySet::Matches(absl::string_view key) const {
  const Digest presented = Sha256(key);
  int matched = 0;
  for (const Digest& d : digests_) {
    matched |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0;
  }
  return matched != 0 && !key.empty();
}

bool ApiKeySet::MatchesAuthorization(absl::string_view authorization) const {
  return Matches(BearerToken(authorization));
}

}  // namespace moesplit::auth
