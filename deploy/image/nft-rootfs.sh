#!/usr/bin/env bash
# Copies the build machine's nft binary (Debian's nftables package) and the
# shared libraries it loads, at the same paths, into the folder $1, which
# the image's Dockerfile copies to /: the agent writes its nftables table
# through sigs.k8s.io/knftables, which runs nft. The image stays FROM
# scratch (nothing pulled); the nft in it is the build machine's, so the
# build machine's architecture is the image's.
set -euo pipefail
root=$1
nft=$(command -v nft) || { echo "nft-rootfs: nft not found (Debian's nftables package; make test-deps installs it)" >&2; exit 1; }
nft=$(readlink -f "$nft")
copy() {
  mkdir -p "$root$(dirname "$1")"
  cp -L "$1" "$root$1"
}
copy "$nft"
# ldd prints "name => /path (address)" for each library and "/path (address)"
# for the loader; the vDSO has no file.
ldd "$nft" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
  copy "$lib"
done
# nft reads protocol and service names from these when it prints a table.
for f in /etc/protocols /etc/services; do
  [ -f "$f" ] && copy "$f"
done
