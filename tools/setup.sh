#!/usr/bin/env bash
# Installs every system package the build and the tests need. Idempotent:
# apt-get runs only when a package is missing. Debian 12 (bookworm), as root.
#
# The CUDA toolkit (nvcc 13, cudart, cuBLAS) is expected under /usr/local/cuda
# (it is part of this project's machine image, not a Debian package).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms bazel-skylib
  libabsl-dev libprotobuf-dev protobuf-compiler libre2-dev
  libgtest-dev libbenchmark-dev libssl-dev
  python3 python3-pip
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: /usr/local/cuda/bin/nvcc not found: the CUDA 13 toolkit is required to build the trainer" >&2
  exit 1
fi

# Test-only Python oracles (pinned): tiktoken for the tokenizer differential test.
# Every pin in tools/requirements-test.txt must be installed at its version.
if ! python3 - <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for line in open("tools/requirements-test.txt"):
    line = line.split("#")[0].strip()
    if line:
        name, want = line.split("==")
        if version(name) != want:
            sys.exit(1)
PY
then
  echo "setup: installing test oracles from tools/requirements-test.txt" >&2
  python3 -m pip install -q --disable-pip-version-check -r tools/requirements-test.txt 2>&1 \
    || python3 -m pip install -q --break-system-packages --disable-pip-version-check -r tools/requirements-test.txt
fi
echo "setup: ok" >&2
