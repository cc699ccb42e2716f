// Package cpuset is the fixed set of small pure-Python programs that
// `make bench` and the CPU experiments time.
package cpuset

// Program is one pure-Python CPU benchmark. Its code defines run(); the
// harness times only run(), so interpreter start-up is excluded.
type Program struct {
	Name, What, Code string
}

// Programs is the fixed CPU set. Each takes about 0.05-0.3 s in native
// CPython on the reference machine, and checks its own result so that a
// broken engine cannot look fast.
var Programs = []Program{
	{"fib", "recursion: fib(27)", `
def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)
def run(): assert fib(27) == 196418
`},
	{"loop", "for i in range(3*10**6): x += i", `
def run():
    x = 0
    for i in range(3*10**6): x += i
    assert x == 4499998500000
`},
	{"sum", "sum(range(10**7)), a loop inside C", `
def run(): assert sum(range(10**7)) == 49999995000000
`},
	{"strings", "string building: join, f-strings, +=, replace, split", `
def run():
    parts = [f"item-{i}:{i*i:08d}" for i in range(100000)]
    s = ",".join(parts)
    t = ""
    for p in parts[:20000]: t += p.upper()
    u = s.replace("item", "it").split(",")
    assert len(u) == 100000 and len(t) > 0
`},
	{"json", "json.dumps and json.loads of a nested document, 30 times", `
import json
doc = {"users": [{"id": i, "name": "user%d" % i, "tags": ["a", "b", "c"], "score": i * 1.5,
                  "active": i % 2 == 0, "nested": {"x": [1, 2, 3], "y": None}} for i in range(1000)]}
def run():
    for _ in range(30):
        s = json.dumps(doc)
        d = json.loads(s)
    assert d == doc
`},
	{"regex", "re.findall, re.sub and match over 2 MB of text", `
import re
text = " ".join("user%d@example%d.com said 'hello world' at 12:%02d" % (i, i % 7, i % 60) for i in range(40000))
def run():
    emails = re.findall(r"[\w.]+@[\w.]+\.com", text)
    times = re.sub(r"(\d+):(\d+)", r"\2h\1", text)
    words = sum(1 for w in re.finditer(r"\b[a-z]+\b", text))
    assert len(emails) == 40000 and len(times) == len(text) and words > 0
`},
	{"dictlist", "dict and list work: comprehensions, counting, sorting", `
def run():
    d = {}
    for i in range(200000):
        k = i % 1000
        d[k] = d.get(k, 0) + i
    l = sorted(d.items(), key=lambda kv: -kv[1])
    m = [x * 2 for x in range(200000) if x % 3]
    m.sort(reverse=True)
    s = set(m[:50000])
    assert len(l) == 1000 and len(s) == 50000
`},
	{"nbody", "n-body simulation, 5 bodies, 50000 steps", nbody},
}

const nbody = `
import math
PI = math.pi
SOLAR_MASS = 4 * PI * PI
DAYS_PER_YEAR = 365.24
def bodies():
    return [
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], SOLAR_MASS],
        [[4.84143144246472090e+00, -1.16032004402742839e+00, -1.03622044471123109e-01],
         [1.66007664274403694e-03 * DAYS_PER_YEAR, 7.69901118419740425e-03 * DAYS_PER_YEAR, -6.90460016972063023e-05 * DAYS_PER_YEAR],
         9.54791938424326609e-04 * SOLAR_MASS],
        [[8.34336671824457987e+00, 4.12479856412430479e+00, -4.03523417114321381e-01],
         [-2.76742510726862411e-03 * DAYS_PER_YEAR, 4.99852801234917238e-03 * DAYS_PER_YEAR, 2.30417297573763929e-05 * DAYS_PER_YEAR],
         2.85885980666130812e-04 * SOLAR_MASS],
        [[1.28943695621391310e+01, -1.51111514016986312e+01, -2.23307578892655734e-01],
         [2.96460137564761618e-03 * DAYS_PER_YEAR, 2.37847173959480950e-03 * DAYS_PER_YEAR, -2.96589568540237556e-05 * DAYS_PER_YEAR],
         4.36624404335156298e-05 * SOLAR_MASS],
        [[1.53796971148509165e+01, -2.59193146099879641e+01, 1.79258772950371181e-01],
         [2.68067772490389322e-03 * DAYS_PER_YEAR, 1.62824170038242295e-03 * DAYS_PER_YEAR, -9.51592254519715870e-05 * DAYS_PER_YEAR],
         5.15138902046611451e-05 * SOLAR_MASS]]
def advance(bs, pairs, dt, n):
    for _ in range(n):
        for ([x1, y1, z1], v1, m1, [x2, y2, z2], v2, m2) in pairs:
            dx = x1 - x2; dy = y1 - y2; dz = z1 - z2
            mag = dt * ((dx * dx + dy * dy + dz * dz) ** (-1.5))
            b1m = m1 * mag; b2m = m2 * mag
            v1[0] -= dx * b2m; v1[1] -= dy * b2m; v1[2] -= dz * b2m
            v2[0] += dx * b1m; v2[1] += dy * b1m; v2[2] += dz * b1m
        for (r, [vx, vy, vz], m) in bs:
            r[0] += dt * vx; r[1] += dt * vy; r[2] += dt * vz
def energy(bs):
    e = 0.0
    for i, (r1, v1, m1) in enumerate(bs):
        e += m1 * (v1[0]**2 + v1[1]**2 + v1[2]**2) / 2.0
        for (r2, v2, m2) in bs[i+1:]:
            e -= (m1 * m2) / math.sqrt(sum((a - b)**2 for a, b in zip(r1, r2)))
    return e
def run():
    bs = bodies()
    pairs = [(bs[i][0], bs[i][1], bs[i][2], bs[j][0], bs[j][1], bs[j][2]) for i in range(5) for j in range(i+1, 5)]
    px = sum(v[0] * m for (r, v, m) in bs); py = sum(v[1] * m for (r, v, m) in bs); pz = sum(v[2] * m for (r, v, m) in bs)
    bs[0][1][:] = [-px / SOLAR_MASS, -py / SOLAR_MASS, -pz / SOLAR_MASS]
    advance(bs, pairs, 0.01, 50000)
    assert abs(energy(bs) - (-0.169078071)) < 1e-8, energy(bs)
`

// Harness wraps a program: it runs run() once and prints the seconds it
// took, measured inside the interpreter.
func Harness(p Program) string {
	return p.Code + "\nimport time as _t\n_t0 = _t.perf_counter()\nrun()\nprint(_t.perf_counter() - _t0)\n"
}
