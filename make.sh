#!/bin/sh
# sh make.sh TARGET...: `make TARGET...` on a machine that may not have make
# yet - a fresh Debian 12 image has neither make nor a compiler, and its
# package lists may be empty. Installs make (and nothing else: the targets
# install what they need, scripts/deps.sh) with apt-get, as root or through
# sudo, then runs make. Where make is installed, `make demo` and `make test`
# are the same thing.
set -eu
cd "$(dirname "$0")"
if ! command -v make >/dev/null 2>&1; then
	echo "apf: make.sh: make is not installed; installing it (apt-get)" >&2
	if [ "$(id -u)" -eq 0 ]; then
		sudo=""
	elif command -v sudo >/dev/null 2>&1; then
		sudo="sudo"
	else
		echo "apf: make.sh: make is missing (run as root, or install it: apt-get install make)" >&2
		exit 2
	fi
	export DEBIAN_FRONTEND=noninteractive
	log=$(mktemp "${TMPDIR:-/tmp}/apf-make.XXXXXX")
	trap 'rm -f "$log"' EXIT
	# Empty lists on a fresh image: refresh them first.
	if ! { $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends make; } >"$log" 2>&1; then
		cat "$log" >&2
		echo "apf: make.sh: could not install make with apt-get" >&2
		exit 2
	fi
	rm -f "$log" # exec below skips the EXIT trap
	trap - EXIT
fi
exec make "$@"
