//go:build !linux

package sandbox

// unpopulated reports which pages of b the kernel holds none of where it
// can tell (resident_linux.go); here it cannot.
func unpopulated(b []byte, dst []bool) []bool { return nil }
