package sandbox

import "github.com/fumehood/fumehood/wasi/hostcall"

// HostUsage reports what the sandbox's host-call server holds (tests only).
func HostUsage(s *Sandbox) hostcall.Usage { return s.host.Usage() }
