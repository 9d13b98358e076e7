#!/usr/bin/env bash
# Build the default sandbox image without a registry: debootstrap a minimal Debian rootfs with
# the tools the model expects, add the non-root `sandbox` user and /workspace, and `docker import`
# it. The package mirror is the one this machine's apt already uses.
#
# usage: images/build.sh [TAG]   (default envd-sandbox:latest; skipped when the tag exists
#                                 unless ENVD_IMAGE_REBUILD=1)
set -euo pipefail

tag=${1:-envd-sandbox:latest}
suite=${ENVD_IMAGE_SUITE:-bookworm}
packages=bash,coreutils,python3,git,ripgrep,procps,ca-certificates,findutils,grep,sed,less,file,curl,xz-utils

if [ "${ENVD_IMAGE_REBUILD:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag already present" >&2
  exit 0
fi

mirror=${ENVD_IMAGE_MIRROR:-}
if [ -z "$mirror" ]; then
  # The first Debian URI apt is configured with (deb822 or one-line format).
  mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1 || true)
  [ -n "$mirror" ] || mirror=$(grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}' | head -n 1 || true)
fi
[ -n "$mirror" ] || { echo "no Debian mirror configured; set ENVD_IMAGE_MIRROR" >&2; exit 1; }

command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

work=$(mktemp -d /var/tmp/envd-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs

echo "debootstrap $suite from the configured mirror into $root" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

chroot "$root" /bin/sh -eu <<'SH'
groupadd --gid 1000 sandbox
useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash sandbox
mkdir -p /workspace
chown 1000:1000 /workspace
chmod 0755 /workspace
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/info/*
SH

tar -C "$root" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" >/dev/null
echo "built $tag" >&2
