#!/usr/bin/env bash
# What CI (and a fresh machine) must install besides the Rust toolchain. Idempotent: each
# package is installed only when its command is missing.
set -euo pipefail

need_apt_update=1
apt_install() {
  if [ "$need_apt_update" = 1 ]; then
    apt-get update
    need_apt_update=0
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

# Headless Chromium loads the stateright Explorer in checker/tests/model_check.rs.
if ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium
fi
