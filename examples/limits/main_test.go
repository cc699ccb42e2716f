package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

func TestLimits(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	assert.Regexp(t, `^fuel: 2666646666700000 after [1-5] grants, \d+ used
deadline: stopped, exit code -1
memory: refused, the guest said "MemoryError"
$`, out.String())
}
