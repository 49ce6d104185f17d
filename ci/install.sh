#!/usr/bin/env bash
# Installs the system packages that the tests need beyond the Rust toolchain, and only those
# that are missing. Idempotent: a second run installs nothing. Needs root (CI runs as root).
#
# - etcd-server, etcd-client: etcd 3.4 as the second system under test (nemesis::etcd,
#   nemesis/tests/etcd.rs, `locksmith bench`). The harness talks to etcd through its JSON
#   gateway over plain HTTP, so no protobuf-compiler is needed. The package's own service
#   is never used: the harness starts private nodes on free loopback ports with temporary
#   data dirs.
# - iptables: the harness's kernel net backend (`locksmith test --net kernel`) and the
#   kernel arm of nemesis/tests/net_conformance.rs, both root only.
# - zookeeper: Apache ZooKeeper as a system under test (`--system zookeeper`,
#   nemesis::systems::zookeeper, nemesis/tests/zookeeper.rs, `locksmith bench`). The harness
#   runs QuorumPeerMain from the package's jars in the foreground, one JVM per server with its
#   own zoo.cfg, data dir and loopback ports; the package's service is never used.
# - nftables, passwd: partitions of etcd (`--system etcd --net kernel`, nemesis::net::owner
#   and nemesis/tests/etcd.rs), root only: each node runs as a system user made by useradd
#   (passwd), and nft drops packets by the sending uid.
# - chromium: headless Chromium loads the stateright Explorer in checker/tests/model_check.rs,
#   and renders the plots and `locksmith serve` (checker/tests/plots.rs, nemesis/tests/reports.rs).
# - libxml2-utils: xmllint validates the JUnit reports against ci/junit.xsd
#   (nemesis/tests/reports.rs).

packages=(etcd-server etcd-client iptables nftables passwd chromium libxml2-utils)
# - openssh-server, openssh-client, iproute2: `locksmith hosts up N` (network namespaces on a
#   bridge, `ip`; one sshd per namespace, started by the harness with a config and keys of
#   its own, never the package's service) and `locksmith test --hosts` (the system `ssh`;
#   `tc` from iproute2 for the slow/flaky faults); nemesis/tests/hosts.rs, root only.
# - redis-server, faketime: `--system redis` (Redlock over independent redis-server
#   processes, nemesis::systems::redis, nemesis/tests/redis.rs, `locksmith bench`), each
#   started by the harness with a config of its own on a free loopback port, never the
#   package's service; faketime brings libfaketime (LD_PRELOAD), through which the clock
#   nemesis moves a third-party process's clock (nemesis::faketime).
# - gcc, libc6-dev: the C compiler and headers that build mimalloc, the allocator of the
#   `lockd` and `locksmith` binaries (impl/src/bin/lockd.rs), through the `cc` crate. A
#   machine that links Rust programs already has them (cargo links with `cc`); listed so
#   that the need is written down.
set -euo pipefail

packages=(etcd-server etcd-client iptables nftables passwd chromium libxml2-utils openssh-server openssh-client iproute2 zookeeper redis-server faketime gcc libc6-dev)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "ci/install.sh: all present: ${packages[*]}"
  exit 0
fi

if [ "$(id -u)" != "0" ]; then
  echo "ci/install.sh: not root, cannot install ${missing[*]}; the tests that need them skip" >&2
  exit 0
fi

echo "ci/install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
