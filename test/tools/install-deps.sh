#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine, and
# nothing that is already there: Open vSwitch and the network tools from
# Debian's packages (promtool among them), then the Kubernetes binaries
# (build-binaries.sh), helm among them.
# Needs root (apt-get, and later OVS and network namespaces).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" != 0 ]; then
  echo "install-deps: run as root: OVS, network namespaces and apt-get need it" >&2
  exit 1
fi

missing=()
command -v ovs-vswitchd >/dev/null || missing+=(openvswitch-switch)
command -v ip >/dev/null || missing+=(iproute2)
command -v tcpdump >/dev/null || missing+=(tcpdump)
command -v conntrack >/dev/null || missing+=(conntrack)
command -v ping >/dev/null || missing+=(iputils-ping)
command -v ethtool >/dev/null || missing+=(ethtool)
command -v iptables >/dev/null || missing+=(iptables)
command -v make >/dev/null || missing+=(make)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v nft >/dev/null || missing+=(nftables)
# systemd-analyze verifies deploy/node's units (test/noderecipe).
command -v systemd-analyze >/dev/null || missing+=(systemd)
# promtool checks and unit-tests deploy/monitoring's alerts
# (cmd/internal/monitoring); Debian ships it in the prometheus package.
command -v promtool >/dev/null || missing+=(prometheus)
# FRR's bfdd is the external gateway that controller/bfd's tests
# interoperate with.
[ -x /usr/lib/frr/bfdd ] || missing+=(frr)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Debian's maintainer scripts try to start the system OVS service; the tests
  # start their own isolated instances, so a refusal to start here is fine.
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The cluster in Docker (make e2e) needs a Docker engine, which this kind of
# machine runs; its node image is built once and cached. On a fresh machine
# its build (downloads and unpacking, mostly) runs beside the Kubernetes
# binaries' (compiling, mostly), which saves minutes.
if ! docker info >/dev/null 2>&1; then
  echo "install-deps: no Docker engine answers (docker info); make e2e needs one" >&2
  exit 1
fi
bash "$here/../dockercluster/node-image.sh" >/dev/null &
node_image=$!
bash "$here/build-binaries.sh" --with-cluster "$@" >/dev/null
wait "$node_image"
