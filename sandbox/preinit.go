package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"time"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/hostchan"
	"github.com/fumehood/fumehood/internal/pydriver"
	"github.com/fumehood/fumehood/internal/snapshot"
)

// The Python guest runs every Python run from a pre-initialized image
// (its driver's entry points: guests/cpython/preinit.go):
// fumehood_init starts the interpreter once per guest and mount layout,
// deterministically, and its memory is the image (baseImage). A one-shot
// run is a new instance given the image's pages and one fumehood_exec
// call; a session is such an instance kept between runs, idle. The
// request and the outcome go through the instance's memory, so stdin is
// the user's alone.

// imageSource is what fumehood_init runs to make an image: the start-up
// code every Python run gets, then the driver's Python side.
var imageSource = startupSource + pydriver.DriverPython

// sessionSource is the Python source a guest's base images start from,
// which their cache name covers.
func (g *Guest) sessionSource() string { return sessionSourceFor(g.pyInfo.With) }

// sessionSourceFor is sessionSource for a guest with the optional parts
// with: a variant's images have its parts imported already (numpy: 1.5
// billion fuel, a quarter of a second, that no run pays again; pandas
// many times that).
func sessionSourceFor(with []string) string {
	if slices.Contains(with, cpython.Pandas) {
		return imageSource + "import numpy\nimport pandas\n"
	}
	if slices.Contains(with, cpython.Numpy) {
		return imageSource + "import numpy\n"
	}
	return imageSource
}

// enter runs f, a call of one of the driver's exports, under the run's
// fuel, deadline and errno sink.
func (in *instance) enter(ctx context.Context, r *runState, budget int64, sink *errnoSink, f func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errInternal, p)
		}
	}()
	ctx = context.WithValue(ctx, runKey{}, r)
	r.invoker = in.inv
	in.ctx, in.run = ctx, r
	defer func() { in.ctx, in.run = nil, nil }()
	defer r.supervise(ctx, in.fuelGlobal, in.errnoGlobal, budget, sink)()
	return in.stack.check(in.mod, f(ctx))
}

// initDriver starts the interpreter and runs src (fumehood_init).
func (in *instance) initDriver(ctx context.Context, r *runState, budget int64, sink *errnoSink, src string) error {
	return in.enter(ctx, r, budget, sink, func(ctx context.Context) error {
		return in.drv.Init(ctx, []byte(src))
	})
}

// execDriver runs one request (fumehood_exec) and returns its outcome as
// a Result, each text capped at limit bytes.
func (in *instance) execDriver(ctx context.Context, r *runState, budget int64, sink *errnoSink, req []byte, limit int) (*Result, error) {
	var out *pydriver.Outcome
	err := in.enter(ctx, r, budget, sink, func(ctx context.Context) (err error) {
		out, err = in.drv.Exec(ctx, req, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &Result{HasValue: out.HasValue, Value: out.Value, ValueTruncated: out.HasValue && out.Truncated}
	if e := out.Exception; e != nil {
		res.Exception = &Exception{Type: e.Type, Message: e.Message, Traceback: e.Traceback, Truncated: out.Truncated}
	}
	if out.Exit != nil {
		res.ExitCode = *out.Exit
	}
	return res, nil
}

// layout describes the sandbox's preopens in order, as a base image is
// keyed: memRoot says its root is fumehood's in-memory one.
func (s *Sandbox) layout(memRoot bool) []snapshot.Mount {
	var out []snapshot.Mount
	for _, m := range s.order {
		out = append(out, snapshot.Mount{Path: m.path, ReadOnly: m.fs.ReadOnly(), InMemory: m.path == "/" && memRoot})
	}
	if s.host != nil {
		// The host-call channel is mounted after the others.
		out = append(out, snapshot.Mount{Path: hostMountPath, ReadOnly: true})
	}
	return out
}

// hostPaths are the directories a run's sys.path gets for the host-call
// module and, with a network policy, the sitecustomize that routes
// urllib and http.client through it.
func (s *Sandbox) hostPaths() (paths, site []string) {
	if s.host == nil {
		return nil, nil
	}
	paths = []string{path.Join(hostMountPath, hostchan.PythonPath)}
	if s.host.HasNetwork() {
		site = []string{path.Join(hostMountPath, hostchan.PythonSitePath)}
	}
	return paths, site
}

// runImage runs Python code one-shot from the pre-initialized image of
// the sandbox's layout: a new instance, the image's pages, one request
// carrying everything `python -c` would get from its arguments and
// environment (the code's name, sys.argv, the environment, the mounts'
// quotas, a fresh random seed), then atexit's functions, as an exiting
// interpreter runs them. Code, name and arguments that are not UTF-8
// travel in the request as python's command line takes them: each invalid
// byte a surrogate escape (pyText).
func (s *Sandbox) runImage(ctx context.Context, name, code string, opts *RunOptions, args []string) (*Result, error) {
	// The image first, outside the run's limits: the first run of a
	// layout in a process that finds no image in the cache makes it
	// (about half a second), which is not the code's time.
	base, baseErr := s.g.base(ctx, s.layout(s.memRoot))
	ctx, r, err := s.begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if r.stopped() {
		return r.end(nil, memStats{}, nil)
	}
	if baseErr != nil {
		return r.fail(baseErr)
	}
	// What the code leaves in the control directory is gone by the next
	// run.
	defer s.clearControl()
	rnd := io.Reader(rand.Reader)
	if s.cfg.Deterministic {
		rnd = seededRand(s.cfg.Seed)
	}
	var in *instance
	r.state.setClocks(ctx, s.cfg.Deterministic, 0, nil)
	in, err = s.g.newInstance(ctx, s.fscfg, &sessionClock{in: &in}, rnd, nil, uint64(r.limits.Memory), uint64(base.size))
	if err != nil {
		return r.fail(err)
	}
	defer in.close()
	ck := &checkpoint{size: uint64(base.size)}
	if err := ck.restore(base, in.mod, in.linear); err != nil {
		return r.fail(err)
	}
	argv0 := "-c"
	if name == "" {
		name = "<string>"
	} else {
		argv0 = name
	}
	argv := []pyText{pyText(argv0)}
	for _, a := range args {
		argv = append(argv, pyText(a))
	}
	text := pyText(code)
	req := request{Code: &text, Name: pyText(name), Argv: argv, Final: true,
		MaxValue: r.limits.MaxOutput, Mounts: s.quotas}
	s.setEnv(&req, s.cfg.Env)
	if req.Seed, err = newSeed(rnd); err != nil {
		return r.fail(err)
	}
	body, err := json.Marshal(&req)
	if err != nil {
		return r.fail(err)
	}
	if r.opts.Stdin != nil {
		in.userIn = newStdin(ctx, r.opts.Stdin, r.state)
	}
	in.stdout.w, in.stderr.w = r.stdout, r.stderr
	r.started = time.Now()
	out, runErr := in.execDriver(ctx, r.state, r.budget, &s.errno, body, r.limits.MaxOutput)
	mem := memStats{peak: int64(in.mem.mem.peak), hit: in.mem.mem.refused > 0}
	return r.end(runErr, mem, out)
}
