package sandbox

import (
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/netpolicy"
)

// Defaults applied when Limits leave a field zero.
const (
	// DefaultTimeout bounds a run's wall time.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxOutput bounds how much of each of stdout and stderr is
	// captured in a Result.
	DefaultMaxOutput = 1 << 20
	// DefaultMemoryLimit bounds a run's linear memory.
	DefaultMemoryLimit = 512 << 20
)

// maxMemory is the most linear memory a 32-bit guest can address.
const maxMemory = 1 << 32

// Limits bound a run. A zero field means the default (DefaultTimeout,
// DefaultMemoryLimit, DefaultMaxOutput; for Fuel, DefaultFuelPerSecond of
// the timeout, or DefaultFuel without one).
//
// A sandbox's or session's Limits (Config.Limits) are the most any of its
// runs may use: a run's Limits (RunOptions.Limits) can only lower them, a
// larger request or none leaves the sandbox's (see Lower). Guest.Run and
// Guest.Exec run in a sandbox of their own, whose Limits are the run's.
type Limits struct {
	// Timeout bounds the run's wall time; a negative value in a Config
	// means no bound beyond the context's (in RunOptions, negative values
	// are errors). Time the guest spends sleeping counts.
	Timeout time.Duration
	// Fuel is the run's CPU budget, in WebAssembly instructions executed;
	// UnlimitedFuel lifts the bound. Unset, it is DefaultFuelPerSecond for
	// each second of Timeout, so that a run given only a deadline stops
	// at the deadline (context.DeadlineExceeded), not on fuel first.
	Fuel int64
	// Memory bounds the guest's linear memory in bytes, at most 4 GiB.
	// Growing past it fails inside the guest (Python raises MemoryError).
	Memory int64
	// MaxOutput bounds how many bytes of each of stdout and stderr are
	// kept, and of each text of a session run's value and exception. Past
	// it the middle of the output is dropped: the Result keeps its start,
	// a line "[... N bytes dropped ...]" and its last quarter (the end of
	// a program's output is often what matters: its result, its error),
	// and says so; or, with RunOptions.StopAtOutputLimit, the run is
	// stopped with ErrOutputLimit.
	MaxOutput int
}

// resolve applies the defaults to l, a sandbox's or session's ceiling.
// Negative Fuel, Memory or MaxOutput and Memory past 4 GiB are errors; a
// negative Timeout means none.
func (l Limits) resolve() (Limits, error) {
	switch {
	case l.Fuel < 0:
		return l, fmt.Errorf("sandbox: negative Fuel %d", l.Fuel)
	case l.Memory < 0 || l.Memory > maxMemory:
		return l, fmt.Errorf("sandbox: memory limit %d is outside 0 to 4 GiB", l.Memory)
	case l.MaxOutput < 0:
		return l, fmt.Errorf("sandbox: negative MaxOutput %d", l.MaxOutput)
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	} else if l.Timeout < 0 {
		l.Timeout = -1
	}
	if l.Fuel == 0 {
		l.Fuel = defaultFuel(l.Timeout)
	}
	if l.Memory == 0 {
		l.Memory = DefaultMemoryLimit
	}
	if l.MaxOutput == 0 {
		l.MaxOutput = DefaultMaxOutput
	}
	return l, nil
}

// Lower returns the limits of a run that asks for req under the ceiling l
// (a Config's Limits): l with the defaults applied, each field lowered to
// req's where req's is positive and smaller (any positive Timeout lowers a
// ceiling without one). A larger request, or a zero one, leaves l's. It is
// the rule every run follows; code that passes on a request from
// elsewhere (a model's tool call) can use it to tell what a run will get.
// A negative field of req, or an invalid l, is an error.
func (l Limits) Lower(req Limits) (Limits, error) {
	l, err := l.resolve()
	if err != nil {
		return l, err
	}
	if req.Timeout < 0 || req.Fuel < 0 || req.Memory < 0 || req.MaxOutput < 0 {
		return l, fmt.Errorf("sandbox: a run's limits may not be negative: %+v", req)
	}
	if req.Timeout > 0 && (l.Timeout < 0 || req.Timeout < l.Timeout) {
		l.Timeout = req.Timeout
	}
	if req.Fuel > 0 && req.Fuel < l.Fuel {
		l.Fuel = req.Fuel
	}
	if req.Memory > 0 && req.Memory < l.Memory {
		l.Memory = req.Memory
	}
	if req.MaxOutput > 0 && req.MaxOutput < l.MaxOutput {
		l.MaxOutput = req.MaxOutput
	}
	return l, nil
}

// Config describes a sandbox or a session: what its runs see and may use.
// The zero value (or nil) is a clean room: an in-memory root holding /tmp
// and /work bounded by the default root quota, an empty environment, no network,
// no host functions, real clocks and the default Limits.
type Config struct {
	// Mounts are put at their paths, in addition to the in-memory root
	// (or instead of it, for a mount at "/"). A session's in-memory root
	// is part of its snapshots; mounted filesystems (volumes) are not.
	Mounts []Mount
	// RootQuota bounds the in-memory root; the zero value means 128 MiB
	// and 10,000 files (the root lives in host memory, so it is bounded
	// like the guest's own memory).
	RootQuota wasi.Quota
	// Env is the guest's whole environment (for Python, os.environ).
	// Keys must not be empty or contain '=' or NUL. A session's holds at
	// most 4,096 variables and 512 KiB, what a snapshot holds.
	Env map[string]string
	// Deterministic makes runs repeatable: the clocks start at
	// 2024-01-01T00:00:00Z and advance one nanosecond per unit of fuel (plus
	// the time slept), randomness comes from a generator seeded with Seed,
	// and PYTHONHASHSEED is 0 unless Env sets it. The same program with the
	// same input then prints the same output and uses the same fuel. In a
	// session the clocks go on from run to run; a fork's seed is drawn
	// from its parent's random stream, and a resumed session's stream
	// derives from Seed and its run count.
	Deterministic bool
	// Seed seeds the random source in deterministic mode.
	Seed uint64

	// HostCalls lists the host functions guest code may call (in Python,
	// fumehood.call(name, **kwargs)); nil means none.
	HostCalls *hostcall.Config
	// Network lets guest code make the HTTP requests the policy allows (in
	// Python, urllib.request, http.client and fumehood.http); nil means no
	// network at all, and an empty Policy refuses every request.
	Network *netpolicy.Policy
	// Logger receives a record of every host call and HTTP request; nil
	// drops them (pass slog.Default() to see them).
	Logger *slog.Logger

	// Limits are every run's ceiling (see Limits).
	Limits Limits
	// TotalFuel bounds the fuel of all the runs of the sandbox or session
	// together; 0 means no bound beyond each run's Limits.Fuel. A run
	// started with none left stops at once with ErrFuelExhausted.
	TotalFuel int64
}

// SessionHostMemory returns the most host memory one session under c
// holds at once, in bytes: twice its memory limit (its linear memory, and
// its checkpoint, the pages that differ from the base image, which a
// stopped run rolls back to) and twice its in-memory root's quota (its
// files, and the copy of them a snapshot takes, or of one file a resume
// writes), with no in-memory root for a mount at "/". Measured with the
// limits of then (docs/SECURITY.md): a session that filled its 256 MiB
// held 481 MB besides what every process holds, and a resume of a 337 MB
// snapshot 662 MB, against the 768 MiB this returned (1.25 GiB with the
// default 512 MiB now); the guest's base
// images and pooled memories, per guest rather than per session, are
// bounded apart. A quota that sets no bound on bytes (MaxBytes 0 with
// MaxFiles set) bounds nothing: it returns math.MaxInt64. It is what a
// server running many sessions charges each against its memory (as
// mcpserver's MemoryBudget does); a one-shot run holds at most its memory
// limit and root quota.
func (c *Config) SessionHostMemory() (int64, error) {
	c = c0(c)
	l, err := c.Limits.resolve()
	if err != nil {
		return 0, err
	}
	var root int64
	if !slices.ContainsFunc(c.Mounts, func(m Mount) bool { return m.Path == "/" }) {
		q := c.RootQuota
		if q == (wasi.Quota{}) {
			q = defaultRootQuota
		}
		if q.MaxBytes <= 0 || q.MaxBytes > math.MaxInt64/4 {
			return math.MaxInt64, nil
		}
		root = q.MaxBytes
	}
	return 2 * (l.Memory + root), nil
}

// RunOptions are what one run adds to its sandbox's or session's Config.
// The zero value (or nil) is empty stdin, output kept only in the Result
// and the Config's limits.
type RunOptions struct {
	// Stdin is the guest's standard input; nil means empty. A reader that
	// can block (a pipe, a network stream) is read on a helper goroutine so
	// that the deadline can interrupt the guest.
	Stdin io.Reader
	// Stdout and Stderr, if set, receive the guest's output as it is
	// written, a line at a time: each Write holds whole lines (ending in
	// a newline, or a carriage return for a progress line), except an
	// unended line passed on when the guest sleeps, waits for stdin or
	// ends, or when it reaches 4 KiB. They get all of it (the Result keeps
	// at most Limits.MaxOutput bytes of each), or with StopAtOutputLimit,
	// what was written before the run stopped. Each is called on the
	// run's goroutine: a slow writer slows the run.
	Stdout, Stderr io.Writer
	// Limits can only lower the Config's (see Limits.Lower).
	Limits Limits
	// Refill, if set, is called when the run's fuel is spent, with the
	// fuel used so far. The fuel it returns is added to the budget and the
	// guest goes on where it was; returning 0 ends the run with
	// ErrFuelExhausted.
	Refill func(used int64) (more int64)
	// StopAtOutputLimit stops the run with ErrOutputLimit when it writes
	// more than Limits.MaxOutput bytes to stdout or stderr, instead of
	// dropping the middle.
	StopAtOutputLimit bool
}

// o0 is opts, or the zero RunOptions for nil.
func o0(opts *RunOptions) *RunOptions {
	if opts == nil {
		return &RunOptions{}
	}
	return opts
}

// c0 is cfg, or the zero Config for nil.
func c0(cfg *Config) *Config {
	if cfg == nil {
		return &Config{}
	}
	return cfg
}
