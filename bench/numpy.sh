#!/usr/bin/env bash
# numpy.sh: numpy in the sandbox (the numpy variant of the built guest,
# `fumehood run --with numpy`) against native numpy on this machine.
#
#   bench/numpy.sh [-n RUNS] FUMEHOOD [NATIVE-PYTHON]
#
# Each run is a new process, in the sandbox and natively, timing inside the
# interpreter: `import numpy`, the sum of a float64 array of 10^7 elements
# and a 500x500 float64 matmul (each the median of 5 repetitions in the
# process). Then the wall time of whole CLI runs: `run --with numpy -c
# 'import numpy'`, `run --with numpy -c pass` and `run -c pass` (the default
# guest). Prints the medians over RUNS (default 7) and the ratios to native.
# NATIVE-PYTHON defaults to Debian's /usr/bin/python3 (python3-numpy).
set -euo pipefail
runs=7
if [[ ${1:-} == -n ]]; then runs=$2; shift 2; fi
fh=${1:?usage: $0 [-n RUNS] FUMEHOOD [NATIVE-PYTHON]}
native=${2:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

prog='
import json, statistics, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
a = np.arange(10**7, dtype=np.float64)
red = []
for _ in range(5):
    s = time.perf_counter(); x = float(a.sum()); red.append(time.perf_counter() - s)
assert x == (10**7 - 1) * 10**7 / 2, x
rng = np.random.default_rng(0)
m, n = rng.random((500, 500)), rng.random((500, 500))
mm = []
for _ in range(5):
    s = time.perf_counter(); p = m @ n; mm.append(time.perf_counter() - s)
assert abs(p[0, 0] - float(np.dot(m[0], n[:, 0]))) < 1e-9
print(json.dumps({"version": np.__version__, "import_ms": (t1 - t0) * 1e3,
    "sum_ms": statistics.median(red) * 1e3, "matmul_ms": statistics.median(mm) * 1e3}))
'

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$fh" run --with numpy -c 'import numpy' # warm-up: the compilation cache
"$native" -c 'import numpy'
for _ in $(seq "$runs"); do
	"$fh" run --with numpy --timeout 5m -c "$prog" >>"$tmp/guest"
	"$native" -c "$prog" >>"$tmp/native"
	/usr/bin/time -f '%e %U %S' -a -o "$tmp/cli-import" "$fh" run --with numpy -c 'import numpy'
	/usr/bin/time -f '%e %U %S' -a -o "$tmp/cli-pass-numpy" "$fh" run --with numpy -c 'pass'
	/usr/bin/time -f '%e %U %S' -a -o "$tmp/cli-pass" "$fh" run -c 'pass'
	/usr/bin/time -f '%e %U %S' -a -o "$tmp/native-import" "$native" -c 'import numpy'
done
echo "load average at end:   $(cut -d' ' -f1-3 /proc/loadavg)"

"$native" - "$tmp" "$runs" <<'EOF'
import json, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
def rows(name):
    return [json.loads(l) for l in open(f"{d}/{name}")]
g, n = rows("guest"), rows("native")
print(f"in-process timings, median of {runs} processes (each the median of 5 repetitions):")
print(f"  guest numpy {g[0]['version']}, native numpy {n[0]['version']}")
for k, what in (("import_ms", "import numpy"), ("sum_ms", "sum of 10^7 float64"), ("matmul_ms", "500x500 matmul")):
    gm, nm = statistics.median(r[k] for r in g), statistics.median(r[k] for r in n)
    print(f"  {what:22s} guest {gm:9.1f} ms  native {nm:8.1f} ms  ratio {gm / nm:6.1f}x")
print(f"whole processes, median of {runs} (wall; user+system CPU):")
for name, what in (("cli-import", "run --with numpy -c 'import numpy'"), ("cli-pass-numpy", "run --with numpy -c pass"),
                   ("cli-pass", "run -c pass (default guest)"), ("native-import", "native python3 -c 'import numpy'")):
    t = [list(map(float, l.split())) for l in open(f"{d}/{name}")]
    print(f"  {what:38s} {statistics.median(r[0] for r in t) * 1e3:6.0f} ms wall; {statistics.median(r[1] + r[2] for r in t) * 1e3:6.0f} ms CPU")
EOF
