//go:build !linux

package sandbox

// unpopulated reports which pages of b the kernel holds none of where it
// can tell (resident_linux.go); here it cannot.
func unpopulated(b []byte, dst []bool) []bool { return nil }

// trimZeros gives back runs of zero pages where the kernel lets it
// (resident_linux.go); here it does nothing.
func trimZeros(b []byte, zero []bool) int { return 0 }
