package sandbox

import (
	"path"

	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/fumehood/fumehood/wasi/hostcall"
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
// Python runs get the module on PYTHONPATH (s.pyEnv).
func (s *Sandbox) mountHost(c *Config, fscfg sysfs.FSConfig) (sysfs.FSConfig, error) {
	if c.HostCalls == nil && c.Network == nil {
		return fscfg, nil
	}
	srv, err := hostcall.NewServer(c.HostCalls, c.Network, c.Logger)
	if err != nil {
		return nil, err
	}
	srv.ReportErrno(s.errno.report) // EMFILE past hostcall.MaxOpen
	s.host, s.hostFS = srv, srv.FS()
	pp := path.Join(HostMountPath, hostcall.PythonPath)
	if srv.HasNetwork() {
		// sitecustomize routes urllib and http.client through the policy.
		pp += ":" + path.Join(HostMountPath, hostcall.PythonSitePath)
	}
	if old := c.Env["PYTHONPATH"]; old != "" {
		pp += ":" + old
	}
	s.pyEnv = withEnv(c.Env, "PYTHONPATH", pp)
	return fscfg.WithSysFSMount(s.hostFS, HostMountPath).(sysfs.FSConfig), nil
}
