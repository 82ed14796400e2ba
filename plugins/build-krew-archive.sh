#!/usr/bin/env bash
# Build the krew archive of `kubectl oomwatch`: dist/kubectl-oomwatch.tar.gz holding one
# zipapp of the oomwatch package (the plugin uses the standard library and kubectl only, so
# no dependency goes in) that runs on any python3 >= 3.11, and the license.  Prints the
# sha256 for plugins/oomwatch.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip install -q --target "$work/app" --no-compile --no-deps .
rm -rf "$work"/app/*.dist-info "$work"/app/bin
python3 -m zipapp "$work/app" -p "/usr/bin/env python3" -m "oomwatch.fleet.plugin:main" \
  -o "$work/kubectl-oomwatch"
mkdir -p "$out"
printf 'Apache License 2.0: https://www.apache.org/licenses/LICENSE-2.0\n' > "$work/LICENSE"
tar -C "$work" -czf "$out/kubectl-oomwatch.tar.gz" kubectl-oomwatch LICENSE
sha256sum "$out/kubectl-oomwatch.tar.gz"
