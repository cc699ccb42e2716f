package sandbox

import (
	"path"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// hostMountPath is where a sandbox with host functions or a network policy
// mounts the host-call channel and the Python module fumehood: the channel
// file is hostMountPath/call, the module is in hostMountPath/lib, which runs
// of Python code get on their PYTHONPATH (with hostMountPath/site, whose
// sitecustomize routes urllib and http.client through the network policy,
// when the sandbox has one).
const hostMountPath = "/dev/fumehood"

// mountHost mounts the channel of a sandbox that has host functions or a
// network policy.
// Python runs get the module on PYTHONPATH (s.pyEnv).
func (s *Sandbox) mountHost(c *Config, fscfg sysfs.FSConfig) (sysfs.FSConfig, error) {
	if c.HostCalls == nil && c.Network == nil {
		return fscfg, nil
	}
	srv, err := hostchan.NewServer(c.HostCalls, c.Network, c.Logger)
	if err != nil {
		return nil, err
	}
	srv.ReportErrno(s.errno.report) // EMFILE past hostchan.MaxOpen
	s.host, s.hostFS = srv, srv.FS()
	pp := path.Join(hostMountPath, hostchan.PythonPath)
	if srv.HasNetwork() {
		// sitecustomize routes urllib and http.client through the policy.
		pp += ":" + path.Join(hostMountPath, hostchan.PythonSitePath)
	}
	if old := c.Env["PYTHONPATH"]; old != "" {
		pp += ":" + old
	}
	s.pyEnv = withEnv(c.Env, "PYTHONPATH", pp)
	return fscfg.WithSysFSMount(s.hostFS, hostMountPath).(sysfs.FSConfig), nil
}
