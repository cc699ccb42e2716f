package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseSize parses a byte size such as "256MiB", "64M", "1.5GB" or "4096".
// K, M and G (and KiB, MiB, GiB) are powers of 1024; KB, MB and GB are
// powers of 1000.
func parseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "KMGiB")
	unit := s[len(num):]
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	mult, ok := map[string]float64{"": 1, "B": 1, "K": 1 << 10, "KB": 1e3, "KiB": 1 << 10, "M": 1 << 20, "MB": 1e6,
		"MiB": 1 << 20, "G": 1 << 30, "GB": 1e9, "GiB": 1 << 30}[unit]
	if err != nil || !ok || n < 0 || n*mult >= math.MaxInt64 || math.IsNaN(n) {
		return 0, fmt.Errorf("invalid size %q (want a number with an optional unit: K, M, G, KiB, MiB, GiB, KB, MB, GB)", s)
	}
	return int64(n * mult), nil
}
