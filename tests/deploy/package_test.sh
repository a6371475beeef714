#!/usr/bin/env bash
# The Debian package, as an operator gets it (README.md, "Installing as a
# service"):
#   1. lintian: no error (warnings are printed, not fatal)
#   2. the control data: conffile, maintainer scripts, dependencies
#   3. its files unpacked in a throwaway root, where the unit is checked
#      statically: `systemd-analyze verify` prints nothing, and `systemd-
#      analyze security --offline` scores it at most 2.0 (of 10; lower is
#      safer)
#   4. the installed tccd, on the packaged config, tells a NOTIFY_SOCKET
#      READY=1 once it serves and STOPPING=1 on SIGTERM (notify_test)
# No systemd runs here, so nothing else can be checked live.
#
#   package_test.sh DEB NOTIFY_TEST_BINARY
set -euo pipefail
deb=$1
notify_test=$2
max_exposure=20  # systemd-analyze's scale: 20 is an exposure of 2.0

root=$(mktemp -d /tmp/tccd-package.XXXXXX)
trap 'rm -rf "$root"' EXIT

fail() { echo "package_test: FAIL: $*" >&2; exit 1; }

echo "== lintian"
lintian --fail-on error --tag-display-limit 0 "$deb" 2>&1 |
  grep -v 'running with root privileges' || true
lintian --fail-on error "$deb" >/dev/null 2>&1 || fail "lintian reports errors"

echo "== control"
dpkg-deb -e "$deb" "$root/DEBIAN"
grep -qx '/etc/tccd/tccd.yaml' "$root/DEBIAN/conffiles" ||
  fail "/etc/tccd/tccd.yaml is not a conffile"
for s in postinst prerm postrm; do
  [ -x "$root/DEBIAN/$s" ] || fail "no executable $s"
  sh -n "$root/DEBIAN/$s" || fail "$s: syntax"
done
grep -q 'adduser --system' "$root/DEBIAN/postinst" || fail "postinst makes no user"
depends=$(dpkg-deb -f "$deb" Depends)
# (RocksDB is linked statically: Debian ships librocksdb.a.)
for lib in libgrpc++ libprotobuf libsystemd0 adduser; do
  [[ $depends == *$lib* ]] || fail "Depends lacks $lib: $depends"
done
rm -rf "$root/DEBIAN"

echo "== files"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/tccd usr/bin/tccctl etc/tccd/tccd.yaml \
         lib/systemd/system/tccd.service usr/share/doc/tccd/copyright \
         usr/share/doc/tccd/changelog.gz usr/share/tccd/tccd-rules.yml \
         usr/share/tccd/tccd-dashboard.json; do
  [ -e "$root/$f" ] || fail "missing /$f"
done
grep -qx 'data_dir: /var/lib/tccd' "$root/etc/tccd/tccd.yaml" ||
  fail "the packaged config does not keep the WAL in /var/lib/tccd"
"$root/usr/bin/tccd" --version | grep -q . || fail "tccd --version"
"$root/usr/bin/tccctl" --help >/dev/null || fail "tccctl --help"

echo "== the unit (static)"
unit=$root/lib/systemd/system/tccd.service
for want in 'Type=notify' 'User=tccd' 'StateDirectory=tccd' \
            'Restart=on-failure' 'RestartPreventExitStatus=2 3' \
            'NoNewPrivileges=yes' 'ProtectSystem=strict' 'PrivateTmp=yes' \
            'LimitNOFILE=65536'; do
  grep -qx "$want" "$unit" || fail "the unit lacks $want"
done
# verify resolves the unit's dependencies (sysinit.target...) in the root:
# the machine's own units go in beside ours.
cp -an /lib/systemd/system/. "$root/lib/systemd/system/"
out=$(systemd-analyze verify --root="$root" tccd.service 2>&1) ||
  fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify complains: $out"
systemd-analyze security --offline=yes --root="$root" tccd.service |
  tail -1
systemd-analyze security --offline=yes --root="$root" \
  --threshold=$max_exposure tccd.service >/dev/null ||
  fail "the unit's exposure is above $max_exposure/100"

echo "== the installed tccd under NOTIFY_SOCKET"
TCC_INSTALLED_ROOT=$root "$notify_test" || fail "notify_test"
echo "package_test: PASS"
