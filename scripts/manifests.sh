#!/bin/sh
# make manifests: signed example entries of the baselines, packed for both
# Fashion-MNIST workloads with a key generated for the purpose. The public
# half is written beside them (manifests/examples/signing.pub.pem); the
# private half is thrown away with the temporary $APF_HOME, so nobody can
# sign more entries under it. Verify one with:
#   apf verify manifests/examples/nadamw.apf --key manifests/examples/signing.pub.pem
set -eu
build=${1:-build}
apf=$(cd "$(dirname "$build/apf")" && pwd)/apf
out=manifests/examples
home=$(mktemp -d "${TMPDIR:-/tmp}/apf-manifests.XXXXXX")
trap 'rm -rf "$home"' EXIT
export APF_HOME="$home"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
mkdir -p "$out"
"$apf" keygen -o "$home/signing" --no-trust >/dev/null 2>&1
cp "$home/signing.pub.pem" "$out/signing.pub.pem.tmp"
mv "$out/signing.pub.pem.tmp" "$out/signing.pub.pem"
for dir in submissions/baselines/*/; do
	name=$(basename "$dir")
	"$apf" pack "$dir" -w fmnist_mlp,fmnist_cnn -k "$home/signing.key.pem" \
		-o "$out/$name.apf" >/dev/null
	"$apf" verify "$out/$name.apf" --key "$out/signing.pub.pem" >/dev/null
	"$apf" inspect "$out/$name.apf" --json --key "$out/signing.pub.pem" \
		> "$out/$name.manifest.json"
	echo "$out/$name.apf"
done
