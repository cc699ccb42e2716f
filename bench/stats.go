package main

import (
	"math"
	"slices"
)

func ln(x float64) float64  { return math.Log(x) }
func exp(x float64) float64 { return math.Exp(x) }

// median returns the median of v (the mean of the middle two for an even
// count), or 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// div returns a/b, or 0 when either is 0 (a missing measurement).
func div(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}
