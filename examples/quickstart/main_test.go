package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

func TestQuickstart(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	assert.Contains(t, out.String(), "mean 3.875 median 3.5\n")
	assert.Contains(t, out.String(), "units of fuel")
}
