#!/usr/bin/env bash
# Build Lima's limactl and its Linux guest agent, both v1.2.2, from the Go module proxy only,
# into a Lima prefix: <prefix>/bin/limactl, <prefix>/share/lima/lima-guestagent.Linux-x86_64
# and <prefix>/share/lima/templates (limactl info fails without it).
#
# Usage: scripts/lima/build-limactl.sh [cache-dir]
#   cache-dir defaults to $LEVER_LIMA_CACHE or ./.cache/lima. The prefix is
#   <cache-dir>/limactl-<hash of this script>/, reused when present. Last line printed: the prefix.
#
# `go install pkg@version` does not work against this proxy (it asks for the version list),
# so the binaries are built from a scratch module that pins them with `go get -tool`.
set -euo pipefail

LIMA_VERSION=1.2.2
CACHE=${1:-${LEVER_LIMA_CACHE:-./.cache/lima}}
self=$(readlink -f "$0")
key=$(sha256sum "$self" | cut -c1-12)
mkdir -p "$CACHE"
CACHE=$(readlink -f "$CACHE")
OUT=$CACHE/limactl-$key

if [ -f "$OUT/.done" ]; then
	echo "limactl cached: $OUT" >&2
	echo "$OUT"
	exit 0
fi
export PATH=/usr/local/go/bin:$PATH
WORK=$CACHE/limactl-$key.tmp
rm -rf "$WORK"; mkdir -p "$WORK/mod" "$WORK/bin" "$WORK/share/lima"
s=$(date +%s)
cd "$WORK/mod"
go mod init lever.invalid/limactl-build >/dev/null 2>&1
go get -tool "github.com/lima-vm/lima/cmd/limactl@v$LIMA_VERSION" "github.com/lima-vm/lima/cmd/lima-guestagent@v$LIMA_VERSION"
ld="-s -w -X github.com/lima-vm/lima/pkg/version.Version=$LIMA_VERSION"
go build -trimpath -ldflags "$ld" -o "$WORK/bin/limactl" github.com/lima-vm/lima/cmd/limactl
GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go build -trimpath -ldflags "$ld" \
	-o "$WORK/share/lima/lima-guestagent.Linux-x86_64" github.com/lima-vm/lima/cmd/lima-guestagent
src=$(go list -m -f '{{.Dir}}' github.com/lima-vm/lima)
cp -r "$src/templates" "$WORK/share/lima/templates"
chmod -R u+w "$WORK/share/lima/templates"
cd "$CACHE"; rm -rf "$WORK/mod"
"$WORK/bin/limactl" --version >&2
touch "$WORK/.done"
rm -rf "$OUT"; mv "$WORK" "$OUT"
echo "limactl built in $(( $(date +%s) - s ))s" >&2
echo "$OUT"
