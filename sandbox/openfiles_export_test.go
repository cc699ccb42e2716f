package sandbox

import "fmt"

// OpenDescriptors lists what the session's instance holds open, beyond
// stdio (tests only): "fd name" for each, with "(preopen)" marked.
func OpenDescriptors(s *Session) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return nil, nil
	}
	t, err := descriptorTable(s.inst.mod)
	if err != nil {
		return nil, err
	}
	entries, err := t.list()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.fd < 3 {
			continue
		}
		d := fmt.Sprintf("%d %s", e.fd, e.name)
		if e.isPreopen {
			d += " (preopen)"
		}
		out = append(out, d)
	}
	return out, nil
}

// DescribeOpenFiles lists the live instance's descriptors as a snapshot
// would (tests and benchmarks only).
func DescribeOpenFiles(s *Session) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fds, lost, err := s.describeFiles(s.inst)
	return len(fds) + len(lost), err
}
