package main

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64K": 64 << 10, "256MiB": 256 << 20, "1.5GB": 1_500_000_000, "2G": 2 << 30, "10MB": 10_000_000} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "abc", "-5M", "12XB", "NaN", "1e30G"} {
		_, err := parseSize(bad)
		assert.Error(t, err, bad)
	}
}

// FuzzParseSize checks that parseSize never panics, never returns a
// negative size, and reads back any size it formats as plain bytes.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "64K", "256MiB", "1.5GB", "2G", "10MB", "", "-5M", "NaN", "Inf", "1e30G", "0x10", " 1 K", "9223372036854775807", "1e-300KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if n < 1<<53 { // exact in a float64
			back, err := parseSize(strconv.FormatInt(n, 10))
			if err != nil || back != n {
				t.Fatalf("ParseSize(%q) = %d, but ParseSize(%d) = %d, %v", s, n, n, back, err)
			}
		}
		if n == math.MaxInt64 {
			t.Fatalf("ParseSize(%q) saturated", s)
		}
	})
}
