//go:build linux && (mips || mipsle || mips64 || mips64le || ppc64 || ppc64le)

package sandbox

// pagemapScan is 0 where the ioctl numbers are encoded otherwise: the
// pages are then read from pagemap's entries (resident_linux.go).
const pagemapScan = 0
