//go:build linux

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/bench/internal/cpuset"
)

func TestWriteTable(t *testing.T) {
	set := []cpuset.Program{{Name: "fib"}, {Name: "loop"}}
	ms := map[string][][]float64{
		"fib":  {{10, 30, 20}, {40, 40, 40}},
		"loop": {{100}, {100}},
	}
	var b strings.Builder
	writeTable(&b, "cpu", []string{"plain", "fuel"}, set, ms)
	out := b.String()
	assert.Contains(t, out, "| fib | 20 | 40 (2.00x) |")
	assert.Contains(t, out, "| loop | 100 | 100 (1.00x) |")
	assert.Contains(t, out, "| geometric mean of ratios | 1.00x | 1.41x |")
}

func TestUnknownVariant(t *testing.T) {
	_, _, err := newRunner(context.Background(), "wasmtime")
	require.Error(t, err)
}
