#!/usr/bin/env bash
# nft-rootfs.sh ROOT ARCH: puts Debian's nft binary for ARCH (amd64, arm64)
# and the shared libraries it loads, at their own paths, into the folder
# ROOT, which the image's Dockerfile copies to /: the agent writes its
# nftables table through sigs.k8s.io/knftables, which runs nft. The image
# stays FROM scratch (nothing pulled from a container registry).
#
# The packages come from the build machine's Debian sources (its release:
# Debian 12's nft 1.0.6 here), for ARCH whatever the machine's own, through
# an apt state of this script's (the machine's apt configuration is not
# touched), cached in $EGRESSFLOW_CACHE/apt-ARCH (default
# ~/.cache/egressflow). Only the files nft needs are kept: the binary, the
# libraries and the dynamic loader, and /etc/protocols and /etc/services,
# from which nft reads names when it prints a table.
set -euo pipefail
root=$1
arch=$2
cache=${EGRESSFLOW_CACHE:-$HOME/.cache/egressflow}/apt-$arch
# The package and what it loads (apt-cache depends --recurse of nftables on
# Debian 12, without what a static binary and a FROM scratch image do not
# need at run time). A Debian release that renames one fails here, loudly.
packages=(nftables libnftables1 libedit2 libc6 libmnl0 libnftnl11 libxtables12 libjansson4 libgmp10 libtinfo6 libbsd0 libmd0)

mkdir -p "$cache/state/lists/partial" "$cache/archives/partial" "$root"
apt_opts=(-o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
  -o "Dir::State=$cache/state" -o "Dir::Cache=$cache" -o "Dir::State::status=/dev/null"
  -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
# The lists are refreshed once a day: a new build picks up security fixes.
if [ -z "$(find "$cache/state/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  apt-get "${apt_opts[@]}" -qq update >/dev/null
fi
debs="$cache/debs"
mkdir -p "$debs"
(cd "$debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]/%/:$arch}" >/dev/null)

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
for p in "${packages[@]}"; do
  # The newest downloaded version of each (apt-get download keeps old ones).
  deb=$(ls -t "$debs/${p}_"*"_$arch.deb" | head -1)
  dpkg-deb -x "$deb" "$staging"
done
keep() { # path inside the staging root
  mkdir -p "$root$(dirname "$1")"
  cp -a "$staging$1" "$root$1"
}
keep /usr/sbin/nft
# Every shared library of those packages (symlinks too), and the loader.
while read -r lib; do
  keep "${lib#"$staging"}"
done < <(find "$staging" \( -name '*.so' -o -name '*.so.*' \) \( -type f -o -type l \) \
  -not -path '*/gconv/*' -not -path '*/audit/*' -not -path '*/xtables/*')
# Debian's merged /usr: the loader's path in the binary is /lib/...; lib,
# lib64 and bin are links into /usr in a real system.
for link in lib lib64; do
  if [ -d "$root/usr/$link" ] && [ ! -e "$root/$link" ]; then
    ln -s "usr/$link" "$root/$link"
  fi
done
for f in /etc/protocols /etc/services; do
  [ -f "$f" ] && mkdir -p "$root/etc" && cp "$f" "$root$f"
done
echo "nft-rootfs: $(basename "$(ls -t "$debs/nftables_"*"_$arch.deb" | head -1)") and its libraries for $arch in $root" >&2
