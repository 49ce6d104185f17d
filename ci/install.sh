#!/usr/bin/env bash
# Installs what the tests need beyond the Rust toolchain. Idempotent: installs only what is
# missing. iptables: the harness's kernel net backend (`locksmith test --net kernel`) and
# the kernel arm of nemesis/tests/net_conformance.rs, both root only.
set -euo pipefail
if [ "$(id -u)" = "0" ] && ! command -v iptables >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq iptables
fi
