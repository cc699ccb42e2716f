package runtool

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fumehood/fumehood/internal/textcut"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
)

// GuestInfo is what a Python guest offers code, as Probe finds it: what
// the instructions for a model say about the interpreter.
type GuestInfo struct {
	// Version is Python's version, such as "3.13.5".
	Version string
	// Lacks names the parts of the standard library the guest lacks,
	// among ssl, ctypes, lzma, sqlite3, zlib, bz2, multiprocessing and
	// "time-zone data", in that order.
	Lacks []string
	// Packages are the third-party packages code can import (a variant's
	// optional parts, such as numpy and pandas), as "name version" or,
	// where neither the package's metadata nor the module (if its
	// pre-initialized image imported it) gives a version, the name alone;
	// in dataPackages' order.
	Packages []string
}

// dataPackages are the import names of the third-party packages a guest
// variant can hold (guests/cpython's optional parts and what they bring),
// with their distributions' names, whose metadata gives the version.
var dataPackages = [][2]string{{"numpy", "numpy"}, {"pandas", "pandas"}, {"matplotlib", "matplotlib"}, {"PIL", "pillow"}}

// BuiltGuest is the GuestInfo of the Python guest `fumehood guest build`
// makes (without optional parts): what codetool's Instructions and
// Description constants describe, for callers that cannot probe a guest;
// a Tool or a server describes the guest it runs on.
var BuiltGuest = GuestInfo{Version: "3.13.5", Lacks: []string{"ssl", "ctypes"}}

// probeCode prints the guest's version, what it lacks and the
// third-party packages it has, one line each.
// It imports nothing that runs much code: find_spec looks modules up
// without running them, and zoneinfo's search path is read from the
// build's configuration module as sysconfig would (importing sysconfig
// itself costs 200 million instructions more).
var probeCode = strings.Replace(probeSource, "PACKAGES", pyPairs(dataPackages), 1)

// probeSource is probeCode with PACKAGES for dataPackages.
const probeSource = `import sys, os, importlib, importlib.util as u
print("%d.%d.%d" % sys.version_info[:3])
lacks = [n for n, m in (("ssl", "_ssl"), ("ctypes", "_ctypes"), ("lzma", "_lzma"), ("sqlite3", "_sqlite3"),
    ("zlib", "zlib"), ("bz2", "_bz2"), ("multiprocessing", "multiprocessing")) if u.find_spec(m) is None]
try:
    tz = importlib.import_module("_sysconfigdata_%s_%s_%s" % (sys.abiflags, sys.platform,
        getattr(sys.implementation, "_multiarch", ""))).build_time_vars.get("TZPATH")
except ImportError:
    import sysconfig
    tz = sysconfig.get_config_var("TZPATH")
tzpath = [p for p in (os.environ.get("PYTHONTZPATH") or tz or "").split(os.pathsep) if p]
if u.find_spec("tzdata") is None and not any(os.path.isfile(os.path.join(p, "UTC")) for p in tzpath):
    lacks.append("time-zone data")
print(",".join(lacks))
def version(name, dist):
    try:
        from importlib import metadata
        return " " + metadata.version(dist)
    except Exception:
        v = getattr(sys.modules.get(name), "__version__", None)
        return " " + v if isinstance(v, str) else ""
print(",".join(n + version(n, d) for n, d in PACKAGES if u.find_spec(n) is not None))
`

var (
	probed      sync.Map // guest ID → GuestInfo
	versionLine = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	packageLine = regexp.MustCompile(`^[A-Za-z]+( [0-9][0-9A-Za-z.+]*)?$`)
	lackable    = []string{"ssl", "ctypes", "lzma", "sqlite3", "zlib", "bz2", "multiprocessing", "time-zone data"}
)

// Probe finds out what py offers code by running a short program on it
// (a few milliseconds from the guest's pre-initialized image; the answer
// is kept for the process, by the guest's ID).
func Probe(ctx context.Context, py *sandbox.Guest) (GuestInfo, error) {
	if py == nil || !py.IsPython() {
		return GuestInfo{}, sandbox.ErrNotPython
	}
	if v, ok := probed.Load(py.ID()); ok {
		return v.(GuestInfo), nil
	}
	res, err := py.Run(ctx, probeCode, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 30 * time.Second, MaxOutput: 4096}})
	if err != nil {
		return GuestInfo{}, fmt.Errorf("codetool: probing the guest: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
	if len(lines) != 3 || !versionLine.MatchString(lines[0]) {
		return GuestInfo{}, fmt.Errorf("codetool: probing the guest: unexpected output %q", trunc(string(res.Stdout), 200))
	}
	info := GuestInfo{Version: lines[0]}
	for n := range strings.SplitSeq(lines[1], ",") {
		if slices.Contains(lackable, n) {
			info.Lacks = append(info.Lacks, n)
		}
	}
	for p := range strings.SplitSeq(lines[2], ",") {
		name, _, _ := strings.Cut(p, " ")
		if slices.ContainsFunc(dataPackages, func(d [2]string) bool { return d[0] == name }) && packageLine.MatchString(p) {
			info.Packages = append(info.Packages, p)
		}
	}
	probed.Store(py.ID(), info)
	return info, nil
}

// pyPairs writes pairs as a Python tuple of tuples.
func pyPairs(pairs [][2]string) string {
	var b strings.Builder
	b.WriteString("(")
	for _, p := range pairs {
		fmt.Fprintf(&b, "(%q, %q), ", p[0], p[1])
	}
	b.WriteString(")")
	return b.String()
}

// trunc is textcut.Cut without the report.
func trunc(text string, n int) string {
	t, _ := textcut.Cut(text, n)
	return t
}

// InstructionsFor says what a sandbox has and lacks, for a model: the
// guest's Python and what its standard library lacks, the network the
// policy allows (nil: none), the host directories mounted, and the rules
// every run follows. codetool.Instructions is its text for BuiltGuest with
// no network and no mounts.
func InstructionsFor(info GuestInfo, network *netpolicy.Policy, mounts []sandbox.Mount) string {
	var b strings.Builder
	if len(info.Packages) == 0 {
		fmt.Fprintf(&b, "Python %s (CPython compiled to WebAssembly) with the standard library only: "+
			"no pip and no third-party packages (no numpy, pandas or matplotlib)", info.Version)
	} else {
		fmt.Fprintf(&b, "Python %s (CPython compiled to WebAssembly) with the standard library and %s: "+
			"no pip and no other third-party packages", info.Version, list(info.Packages))
	}
	if len(info.Lacks) > 0 {
		verb := "is"
		if len(info.Lacks) > 1 {
			verb = "are"
		}
		fmt.Fprintf(&b, "; %s %s missing", list(info.Lacks), verb)
	}
	b.WriteString(". ")
	b.WriteString(networkRules(network))
	b.WriteString(" No subprocesses. One thread: threading.Thread.start runs the target to its end " +
		"before returning (a wait on another thread raises), and asyncio and concurrent.futures' " +
		"executors run tasks one after another. ")
	b.WriteString("The filesystem is in memory: keep data and results under /work, scratch files under /tmp")
	for i, m := range mounts {
		if i == 0 {
			b.WriteString("; host directories are mounted at ")
		} else {
			b.WriteString(", ")
		}
		mode := "read-write"
		if m.ReadOnly {
			mode = "read-only"
		}
		fmt.Fprintf(&b, "%s (%s)", m.Path, mode)
	}
	b.WriteString(".")
	if slices.ContainsFunc(info.Packages, func(p string) bool { return strings.HasPrefix(p, "matplotlib") }) {
		b.WriteString(" Charts: matplotlib draws with its Agg backend; plt.savefig(\"/work/chart.png\") " +
			"(or .svg) saves one where the result attaches it, and plt.show() saves the open figures as /work/figure-N.png.")
	}
	b.WriteString(" Each run is bounded in wall time, CPU (fuel), memory and output; a run that hits a limit is stopped.")
	return b.String()
}

// networkRules says what network a policy gives.
func networkRules(p *netpolicy.Policy) string {
	if p == nil || len(p.Allow) == 0 {
		return "No network: urllib, http.client and sockets raise PermissionError."
	}
	var hosts []string
	for _, r := range p.Allow {
		h := strings.TrimPrefix(r.String(), "allow ")
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	const most = 20
	s := strings.Join(hosts[:min(len(hosts), most)], ", ")
	if len(hosts) > most {
		s += fmt.Sprintf(" and %d more", len(hosts)-most)
	}
	return "Network: HTTP and HTTPS requests through urllib.request or http.client (the host speaks TLS), only to " +
		trunc(s, 2000) + "; no raw sockets."
}

// list joins names as "a, b and c".
func list(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
