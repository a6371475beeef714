#!/usr/bin/env bash
# Builds the Debian package: build/tccd_<version>_amd64.deb (or in
# $TCC_BUILD_DIR), with tccd, tccctl, /etc/tccd/tccd.yaml and the systemd
# unit (deploy/, README.md "Installing as a service"). Install it with
#   apt install ./build/tccd_<version>_amd64.deb
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build_dir=${TCC_BUILD_DIR:-build}
(cd "$build_dir" && cpack -G DEB --config CPackConfig.cmake >/dev/null)
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' \
  "$build_dir/CPackConfig.cmake")
deb=$build_dir/tccd_${version}_amd64.deb
[ -f "$deb" ] || { echo "package.sh: no $deb" >&2; exit 1; }
echo "package: $deb"
