#!/usr/bin/env bash
# Builds the Python SDK's wheel offline, as a user would (Debian's
# python3-build, --no-isolation: no package index), from the sources and the
# stubs the build generated, then checks that the wheel holds both and that
# the SDK imports from it alone.
#   build_wheel.sh SDK_DIR GEN_DIR OUT_DIR
set -euo pipefail
sdk=$1 gen=$2 out=$3
stage=$(mktemp -d "${TMPDIR:-/tmp}/tcc-wheel.XXXXXX")
trap 'rm -rf "$stage"' EXIT
cp -r "$sdk/pyproject.toml" "$sdk/README.md" "$sdk/src" "$stage/"
mkdir -p "$stage/src/tcc"
cp -r "$gen/tcc/v1" "$stage/src/tcc/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$out"
mkdir -p "$out"
(cd "$stage" && /usr/bin/python3 -m build --no-isolation --wheel --outdir "$out" >"$out/build.log" 2>&1) ||
  { cat "$out/build.log" >&2; exit 1; }
wheel=$(ls "$out"/tcc_participant-*.whl)
echo "built $wheel"
listing=$(/usr/bin/python3 -m zipfile -l "$wheel")
for f in tcc_participant/__init__.py tcc_participant/barrier.py \
         tcc_participant/http_server.py tcc_participant/stores/postgres_store.py \
         tcc/v1/participant_pb2.py tcc/v1/participant_pb2_grpc.py \
         tcc/v1/coordinator_pb2_grpc.py; do
  grep -q " *$f " <<<"$listing" || grep -q "$f" <<<"$listing" ||
    { echo "build_wheel.sh: $f missing from the wheel" >&2; exit 1; }
done
# Import from the wheel alone, unpacked as an installer lays it out (a
# site directory of its own), nothing of the checkout on the path.
site="$out/site"
/usr/bin/python3 -m zipfile -e "$wheel" "$site"
cd "$out"
env -u PYTHONPATH PYTHONPATH="$site" /usr/bin/python3 -c '
import sys
import tcc_participant, tcc_participant.http_server, tcc_participant.grpc_server
import tcc_participant.client
from tcc.v1 import participant_pb2
site = sys.argv[1]
for m in (tcc_participant, participant_pb2):
    assert m.__file__.startswith(site + "/"), m.__file__
print("imported from the wheel:", tcc_participant.__file__)
' "$site"
