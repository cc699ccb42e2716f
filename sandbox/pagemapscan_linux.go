//go:build linux && !mips && !mipsle && !mips64 && !mips64le && !ppc64 && !ppc64le

package sandbox

// pagemapScan is the PAGEMAP_SCAN ioctl of /proc/self/pagemap (Linux 6.7),
// _IOWR('f', 16, struct pm_scan_arg) in the encoding of these
// architectures.
const pagemapScan = 0xc0606610
