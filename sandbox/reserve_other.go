//go:build !linux

package sandbox

// reserveMemory returns nil where memories are not mapped: they are
// allocated by Go, and grown by copying.
func reserveMemory(uint64) []byte { return nil }

func unreserveMemory([]byte) {}
