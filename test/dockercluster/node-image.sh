#!/usr/bin/env bash
# Builds the Docker image of a cluster node (and of the external host):
# a Debian bookworm root filesystem made by debootstrap with the packages in
# node-packages.txt (containerd, runc, the CNI plugins, Open vSwitch, ...),
# imported with `docker import`. Nothing is pulled from a registry: the
# packages come from the Debian mirror this machine's apt already uses.
# The image is tagged egressflow-node:<hash of this script and the package
# list> and not built again while that tag exists. Prints the tag.
# Needs root and Docker.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/node-image.sh" "$here/node-packages.txt" | sha256sum | cut -c1-12)
tag="egressflow-node:$key"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
# The mirror apt is configured with (deb822 or one-line sources).
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1)
fi
if [ -z "$mirror" ]; then
  echo "node-image: no Debian mirror found in apt's sources" >&2
  exit 1
fi
packages=$(grep -v '^#' "$here/node-packages.txt" | grep -v '^$' | paste -sd, -)
rootfs=$(mktemp -d /var/tmp/egressflow-node.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "node-image: debootstrap bookworm with $packages (a few minutes; cached as $tag)" >&2
debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -n 30 "$rootfs.log" >&2
  rm -f "$rootfs.log"
  exit 1
}
rm -f "$rootfs.log"
rm -f "$rootfs"/var/cache/apt/archives/*.deb
# minbase has no machine id; each node writes its own at start.
rm -f "$rootfs/etc/machine-id"
tar -C "$rootfs" -c . | docker import - "$tag" >/dev/null
echo "$tag"
