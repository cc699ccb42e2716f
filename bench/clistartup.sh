#!/usr/bin/env bash
# clistartup.sh: the warm start-up of the command line, `fumehood run -c
# 'print(1)'`, for one or more fumehood binaries, alternating them round
# by round; prints the median and minimum wall time and the median CPU time
# (user + system) of each, in milliseconds.
#
#   bench/clistartup.sh [-n ROUNDS] BINARY... [-- RUN-FLAGS...]
#
# Run flags (such as --cache-dir DIR) go after --; $FUMEHOOD_GUEST chooses
# the guest. Two warm-up runs of each binary come first and are not counted.
set -euo pipefail
rounds=21
if [[ ${1:-} == -n ]]; then rounds=$2; shift 2; fi
bins=()
while [[ $# -gt 0 && $1 != -- ]]; do bins+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
[[ ${#bins[@]} -gt 0 ]] || { echo "usage: $0 [-n ROUNDS] BINARY... [-- RUN-FLAGS...]" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in "${bins[@]}"; do
	for _ in 1 2; do "$b" run "$@" -c 'print(1)' >/dev/null; done
done
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$rounds"); do
	for i in "${!bins[@]}"; do
		/usr/bin/time -f '%e %U %S' -a -o "$tmp/$i" "${bins[$i]}" run "$@" -c 'print(1)' >/dev/null
	done
done
echo "load average at end:   $(cut -d' ' -f1-3 /proc/loadavg)"
for i in "${!bins[@]}"; do
	awk -v name="${bins[$i]}" '
		{ wall[NR] = $1 * 1000; cpu[NR] = ($2 + $3) * 1000 }
		function median(a, n,   i, j, t) {
			for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
			return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
		}
		END { n = NR; w = median(wall, n); min = wall[1]; c = median(cpu, n)
			printf "%s: wall median %.0f ms (min %.0f), CPU median %.0f ms, %d runs\n", name, w, min, c, n }
	' "$tmp/$i"
done
