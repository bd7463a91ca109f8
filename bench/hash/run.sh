#!/bin/bash
# bench/hash: tree digest of a generated ~1 GiB tree of ~2,000 files, apf vs
# sha256sum over the same files, and vs two cores' `openssl speed -evp
# sha256` rate, all measured in this run with a warm page cache.
# Usage: bench/hash/run.sh BUILD_DIR   (prints RESULT lines; each side's
# spread over its rounds as tree_apf_spread and tree_sha256sum_spread)
set -euo pipefail
build=${1:-build}
apf=$build/apf
files=${APF_BENCH_HASH_FILES:-2000}
total_mib=${APF_BENCH_HASH_MIB:-1024}
reps=${APF_BENCH_REPS:-9}
dir=$(mktemp -d "${TMPDIR:-/tmp}/apf-bench-hash.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# Sizes vary (from a few KiB to ~1.5 MiB) so the scheduler's balancing is
# exercised, and sum to total_mib.
python3 - "$dir" "$files" "$total_mib" <<'PY'
import os, random, sys
root, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) << 20
rng = random.Random(1)
weights = [rng.uniform(0.02, 3.0) for _ in range(n)]
scale = total / sum(weights)
block = os.urandom(1 << 20)
for i, w in enumerate(weights):
    d = os.path.join(root, f"d{i % 37:02d}")
    os.makedirs(d, exist_ok=True)
    size = int(w * scale)
    with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
        off = (i * 7919) % len(block)
        while size > 0:
            chunk = block[off:off + size] or block[:size]
            f.write(chunk)
            size -= len(chunk)
            off = 0
PY
bytes=$(du -sb "$dir" | cut -f1)
find "$dir" -type f -print0 | xargs -0 cat > /dev/null   # warm the page cache

best() { sort -g | head -1; }
time_cmd() {
	local t0 t1
	t0=$(date +%s.%N)
	"$@" > /dev/null
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l
}

# The two sides alternate (a machine whose speed drifts moves both alike),
# and each side's rounds are judged for spread at the end.
apf_ts=()
sum_ts=()
for _ in $(seq "$reps"); do
	apf_ts+=("$(time_cmd "$apf" hash "$dir")")
	sum_ts+=("$(time_cmd bash -c "cd '$dir' && find . -type f -print0 | sort -z | xargs -0 sha256sum")")
done
apf_t=$(printf '%s\n' "${apf_ts[@]}" | best)
sum_t=$(printf '%s\n' "${sum_ts[@]}" | best)
# Two cores' OpenSSL rate on 16 KiB blocks (the last column), in kB/s.
ossl_kbs=$(openssl speed -seconds 3 -multi "$(nproc)" -evp sha256 2>/dev/null |
	awk '/^sha256/ {v=$NF} END {sub(/k$/, "", v); print v}')

gbps() { echo "$bytes / $1 / 1000000000" | bc -l; }
apf_gbps=$(gbps "$apf_t")
sum_gbps=$(gbps "$sum_t")
ossl_gbps=$(echo "$ossl_kbs * 1000 / 1000000000" | bc -l)
printf 'bench hash: %d files, %.0f MiB, best of %d\n' "$files" \
	"$(echo "$bytes / 1048576" | bc -l)" "$reps"
printf 'RESULT hash apf_tree_gbps %.3f\n' "$apf_gbps"
printf 'RESULT hash sha256sum_gbps %.3f\n' "$sum_gbps"
printf 'RESULT hash ratio_vs_sha256sum %.2f\n' "$(echo "$apf_gbps / $sum_gbps" | bc -l)"
printf 'RESULT hash openssl_speed_%dcore_gbps %.3f\n' "$(nproc)" "$ossl_gbps"
printf 'RESULT hash fraction_of_openssl_speed %.3f\n' "$(echo "$apf_gbps / $ossl_gbps" | bc -l)"
python3 "$(dirname "$0")/../../scripts/quiet.py" rounds hash \
	"tree/apf=$(IFS=,; echo "${apf_ts[*]}")" "tree/sha256sum=$(IFS=,; echo "${sum_ts[*]}")"
