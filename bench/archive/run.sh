#!/bin/bash
# bench/archive: the entry archive on a generated tree of ~2,000 files
# (~64 MiB, half text-like, half incompressible), against its peers measured
# in the same run with a warm page cache:
#   pack     apf writer          vs tar --format=pax | zstd -12 -T1
#   read     apf reader          vs zstd -dc | tar -t  (apf also hashes the
#                                   file twice and checks every header)
#   extract  apf safe extraction vs zstd -dc | tar -x  (apf also syncs the
#                                   tree to disk before renaming it in place)
# Ratios are apf time / peer time (lower is better; 1 = as fast).
# Each side's spread over its rounds: <op>_apf_spread, <op>_peer_spread.
# Usage: bench/archive/run.sh BUILD_DIR   (prints RESULT lines)
set -euo pipefail
build=${1:-build}
drv=$build/bench/archive/archive
files=${APF_BENCH_ARCHIVE_FILES:-2000}
total_mib=${APF_BENCH_ARCHIVE_MIB:-64}
reps=${APF_BENCH_REPS:-9}
dir=$(mktemp -d "${TMPDIR:-/tmp}/apf-bench-archive.XXXXXX")
trap 'rm -rf "$dir"' EXIT
src=$dir/src

python3 - "$src" "$files" "$total_mib" <<'PY'
import os, random, sys
root, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) << 20
rng = random.Random(1)
weights = [rng.uniform(0.02, 3.0) for _ in range(n)]
scale = total / sum(weights)
noise = os.urandom(1 << 20)
words = [("w%d" % rng.randrange(5000)).encode() for _ in range(200000)]
text = b" ".join(words)
for i, w in enumerate(weights):
    d = os.path.join(root, "submission", f"d{i % 37:02d}")
    os.makedirs(d, exist_ok=True)
    size = int(w * scale)
    blob = text if i % 2 else noise
    off = (i * 7919) % (len(blob) // 2)
    with open(os.path.join(d, f"f{i:05d}.{'c' if i % 2 else 'bin'}"), "wb") as f:
        while size > 0:
            chunk = blob[off:off + size]
            f.write(chunk)
            size -= len(chunk)
            off = 0
PY
bytes=$(du -sb "$src" | cut -f1)
find "$src" -type f -print0 | xargs -0 cat > /dev/null

best() { sort -g | head -1; }
time_cmd() {
	local t0 t1
	t0=$(date +%s.%N)
	"$@" > /dev/null
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l
}
fresh() { rm -rf "$dir/out" "$dir/e.apf" "$dir/peer.tar.zst"; }

# Each operation's two sides alternate, and every side's rounds are judged
# for spread at the end.
pack_ts=() peer_pack_ts=() read_ts=() peer_read_ts=() extract_ts=() peer_extract_ts=()
for _ in $(seq "$reps"); do
	fresh
	pack_ts+=("$(time_cmd "$drv" pack "$src" "$dir/e.apf")")
	peer_pack_ts+=("$(time_cmd bash -c \
		"tar --sort=name --format=pax --mtime=@0 --owner=0 --group=0 --numeric-owner -C '$src' -cf - . | zstd -q -12 -T1 -o '$dir/peer.tar.zst'")")
done
for _ in $(seq "$reps"); do
	read_ts+=("$(time_cmd "$drv" read "$dir/e.apf")")
	peer_read_ts+=("$(time_cmd bash -c "zstd -qdc '$dir/peer.tar.zst' | tar -tf -")")
done
for _ in $(seq "$reps"); do
	rm -rf "$dir/out"
	extract_ts+=("$(time_cmd "$drv" extract "$dir/e.apf" "$dir/out")")
	rm -rf "$dir/out.peer"
	mkdir "$dir/out.peer"
	peer_extract_ts+=("$(time_cmd bash -c "zstd -qdc '$dir/peer.tar.zst' | tar -xf - -C '$dir/out.peer'")")
done
bestof() { printf '%s\n' "$@" | best; }
pack_t=$(bestof "${pack_ts[@]}") peer_pack_t=$(bestof "${peer_pack_ts[@]}")
read_t=$(bestof "${read_ts[@]}") peer_read_t=$(bestof "${peer_read_ts[@]}")
extract_t=$(bestof "${extract_ts[@]}") peer_extract_t=$(bestof "${peer_extract_ts[@]}")
diff -r "$src" "$dir/out" > /dev/null
diff -r "$src" "$dir/out.peer" > /dev/null
diff -r "$src" "$dir/out" > /dev/null

apf_size=$(stat -c %s "$dir/e.apf")
peer_size=$(stat -c %s "$dir/peer.tar.zst")
mbps() { echo "$bytes / $1 / 1000000" | bc -l; }
ratio() { echo "$1 / $2" | bc -l; }
printf 'bench archive: %d files, %.0f MiB, best of %d\n' "$files" \
	"$(echo "$bytes / 1048576" | bc -l)" "$reps"
printf '  pack     %7.1f MB/s   peer %7.1f MB/s   ratio %.2f\n' \
	"$(mbps "$pack_t")" "$(mbps "$peer_pack_t")" "$(ratio "$pack_t" "$peer_pack_t")"
printf '  read     %7.1f MB/s   peer %7.1f MB/s   ratio %.2f\n' \
	"$(mbps "$read_t")" "$(mbps "$peer_read_t")" "$(ratio "$read_t" "$peer_read_t")"
printf '  extract  %7.1f MB/s   peer %7.1f MB/s   ratio %.2f\n' \
	"$(mbps "$extract_t")" "$(mbps "$peer_extract_t")" "$(ratio "$extract_t" "$peer_extract_t")"
printf '  size     %d bytes     peer %d bytes     ratio %.4f\n' \
	"$apf_size" "$peer_size" "$(ratio "$apf_size" "$peer_size")"
printf 'RESULT archive pack_ratio %.3f\n' "$(ratio "$pack_t" "$peer_pack_t")"
printf 'RESULT archive read_ratio %.3f\n' "$(ratio "$read_t" "$peer_read_t")"
printf 'RESULT archive extract_ratio %.3f\n' "$(ratio "$extract_t" "$peer_extract_t")"
printf 'RESULT archive size_ratio %.4f\n' "$(ratio "$apf_size" "$peer_size")"
printf 'RESULT archive pack_mbps %.1f\n' "$(mbps "$pack_t")"
printf 'RESULT archive extract_mbps %.1f\n' "$(mbps "$extract_t")"
csv() { local IFS=,; echo "$*"; }
python3 "$(dirname "$0")/../../scripts/quiet.py" rounds archive \
	"pack/apf=$(csv "${pack_ts[@]}")" "pack/peer=$(csv "${peer_pack_ts[@]}")" \
	"read/apf=$(csv "${read_ts[@]}")" "read/peer=$(csv "${peer_read_ts[@]}")" \
	"extract/apf=$(csv "${extract_ts[@]}")" "extract/peer=$(csv "${peer_extract_ts[@]}")"
