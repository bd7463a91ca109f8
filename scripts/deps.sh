#!/bin/sh
# Installs the Debian packages apf needs, with apt-get, when they are missing.
# Usage: scripts/deps.sh GROUP...   (groups: build, test, bench, runtime, unit)
#   build    what compiles and links apf
#   runtime  the data the shipped workloads read (an image has build + runtime):
#            Fashion-MNIST, and the fortunes text_lm's corpus is cut from
#   unit     what the unit tests need beyond build (the image build runs them)
#   test     everything make test uses: the unit tests' (PyTorch and numpy
#            for the cross-checks of the models, the ports and linalg), the
#            end-to-end tests' (python, chromium for the report, podman and
#            debootstrap for the container test, slurm-wlm and munge for the
#            Slurm test)
#   bench    the peers the benchmarks measure against
set -eu

build="gcc make pkg-config git python3 libarchive-dev libssl-dev libgit2-dev libinih-dev
libjansson-dev libopenblas-dev libseccomp-dev libelf-dev zlib1g-dev libzstd-dev"
test="libcmocka-dev python3 python3-jsonschema python3-torch python3-numpy openssl zstd
dataset-fashion-mnist util-linux iproute2 man-db groff-base chromium podman runc
debootstrap slurm-wlm munge fortunes"
runtime="dataset-fashion-mnist fortunes"
unit="libcmocka-dev python3"
bench="python3-torch coreutils bc dataset-fashion-mnist"

want=""
for g in "$@"; do
	case "$g" in
	build) want="$want $build" ;;
	test) want="$want $test" ;;
	bench) want="$want $bench" ;;
	runtime) want="$want $runtime" ;;
	unit) want="$want $unit" ;;
	*) echo "apf: deps: unknown group '$g'" >&2; exit 2 ;;
	esac
done

missing=""
for p in $want; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "apf: deps: installing$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "apf: deps: missing packages:$missing (run as root or install them)" >&2
	exit 2
fi
export DEBIAN_FRONTEND=noninteractive
# A fresh image has empty package lists (apt-get would answer "Unable to
# locate package" for each one): refresh them first, quietly. Otherwise try
# the lists as they are, and refresh once only if that fails. The apt-get
# output is kept and shown only when the install fails for good.
lists=${APF_APT_LISTS:-/var/lib/apt/lists}
log=$(mktemp "${TMPDIR:-/tmp}/apf-deps.XXXXXX")
trap 'rm -f "$log"' EXIT
fresh=0
if ! ls "$lists" 2>/dev/null | grep -q '_Packages'; then
	$sudo apt-get update -q >"$log" 2>&1 || { cat "$log" >&2; echo "apf: deps: apt-get update failed" >&2; exit 2; }
	fresh=1
fi
# shellcheck disable=SC2086
if ! $sudo apt-get install -y -q --no-install-recommends $missing >"$log" 2>&1; then
	if [ "$fresh" -eq 1 ] || ! $sudo apt-get update -q >"$log" 2>&1 ||
	   ! $sudo apt-get install -y -q --no-install-recommends $missing >"$log" 2>&1; then
		cat "$log" >&2
		echo "apf: deps: could not install:$missing" >&2
		exit 2
	fi
fi
