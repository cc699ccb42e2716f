package sandbox

import (
	"context"
	"path"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// HostMountPath is where a sandbox with host functions or a network policy
// mounts the host-call channel and the Python module fumehood: the channel
// file is HostMountPath/call, the module is in HostMountPath/lib, which runs
// of Python code get on their PYTHONPATH (with HostMountPath/site, whose
// sitecustomize routes urllib and http.client through the network policy,
// when the sandbox has one).
const HostMountPath = "/dev/fumehood"

// mountHost mounts the channel of a sandbox that has host functions or a
// network policy.
func (s *Sandbox) mountHost(c *SandboxConfig, fscfg sysfs.FSConfig) (sysfs.FSConfig, error) {
	if c.HostCalls == nil && c.Network == nil {
		return fscfg, nil
	}
	srv, err := hostchan.NewServer(c.HostCalls, c.Network, c.Logger)
	if err != nil {
		return nil, err
	}
	srv.ReportErrno(s.errno.report) // EMFILE past hostchan.MaxOpen
	s.host, s.hostFS = srv, srv.FS()
	return fscfg.WithSysFSMount(s.hostFS, HostMountPath).(sysfs.FSConfig), nil
}

// hostKey finds a sandbox's host-call server in a run's context.
type hostKey struct{}

// withHost prepares a Python run of a sandbox with a host-call server: the
// module on PYTHONPATH, the server in the context for exec to bind.
func (s *Sandbox) withHost(ctx context.Context, cfg *Config, python bool) (context.Context, *Config) {
	if s.host == nil {
		return ctx, cfg
	}
	ctx = context.WithValue(ctx, hostKey{}, s.host)
	if !python {
		return ctx, cfg
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	pp := path.Join(HostMountPath, hostchan.PythonPath)
	if s.host.HasNetwork() {
		// sitecustomize routes urllib and http.client through the policy.
		pp += ":" + path.Join(HostMountPath, hostchan.PythonSitePath)
	}
	if old := c.Env["PYTHONPATH"]; old != "" {
		pp += ":" + old
	}
	c.Env = withEnv(c.Env, "PYTHONPATH", pp)
	return ctx, &c
}

// hostRun is the binding of one run to its sandbox's host-call server.
type hostRun struct {
	end func() hostchan.Stats
}

// beginHost binds the run whose context is ctx (carrying its deadline) to
// the sandbox's host-call server, if it has one.
func beginHost(ctx context.Context) (*hostRun, error) {
	srv, _ := ctx.Value(hostKey{}).(*hostchan.Server)
	if srv == nil {
		return nil, nil
	}
	end, err := srv.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &hostRun{end: end}, nil
}

// finish unbinds the run (again, harmlessly) and reports its counts in
// res, if not nil.
func (h *hostRun) finish(res *Result) {
	if h == nil {
		return
	}
	st := h.end()
	if res != nil {
		res.HostCalls, res.HTTPRequests = st.Calls, st.HTTPRequests
	}
}
