package sandbox

import "github.com/fumehood/fumehood/internal/hostchan"

// HostUsage reports what the sandbox's host-call server holds (tests only).
func HostUsage(s *Sandbox) hostchan.Usage { return s.host.Usage() }
