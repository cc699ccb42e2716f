package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

func TestAgentLoop(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	transcript := out.String()
	assert.Equal(t, 3, strings.Count(transcript, "model, attempt "), transcript)
	assert.Contains(t, transcript, "sandbox: TypeError: unsupported operand type(s) for +: 'int' and 'str'\n")
	assert.Contains(t, transcript, "sandbox: KeyError: 'Amount'\n")
	assert.True(t, strings.HasSuffix(transcript, "sandbox: ok\n    ada spent 43.75\nanswer: 'ada'\n"), transcript)
}

func TestModelGivesUp(t *testing.T) {
	sandboxtest.Built(t)
	m := &model{}
	_, err := m.next("")
	require.NoError(t, err)
	_, err = m.next("NameError: name 'orders' is not defined")
	assert.ErrorContains(t, err, "no answer to")
}
