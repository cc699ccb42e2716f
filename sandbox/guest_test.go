package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/sandbox"
)

func goGuest(t *testing.T) *sandbox.Guest {
	t.Helper()
	g, err := sandbox.Compile(context.Background(), testenv.BuildGo(t, "guests/testguest"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

func TestGoWASIGuest(t *testing.T) {
	g := goGuest(t)
	assert.False(t, g.IsPython())
	assert.Len(t, g.ID(), 64)
	ctx := context.Background()

	res, err := g.Exec(ctx, nil, "args", "one", "two words")
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo words\n", string(res.Stdout))

	res, err = g.Exec(ctx, nil, "env")
	require.NoError(t, err)
	assert.Empty(t, res.Stdout, "the environment is empty by default")

	withEnv, err := g.NewSandbox(&sandbox.Config{Env: map[string]string{"B": "2", "A": "1"}})
	require.NoError(t, err)
	defer withEnv.Close()
	res, err = withEnv.Exec(ctx, nil, "env")
	require.NoError(t, err)
	assert.Equal(t, "A=1\nB=2\n", string(res.Stdout))

	res, err = g.Exec(ctx, nil, "exit", "7")
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 7, exit.Code)
	assert.Equal(t, 7, res.ExitCode)

	res, err = g.Exec(ctx, &sandbox.RunOptions{Stdin: strings.NewReader("through stdin")}, "cat")
	require.NoError(t, err)
	assert.Equal(t, "through stdin", string(res.Stdout))

	res, err = g.Exec(ctx, nil, "ls", "/")
	require.NoError(t, err)
	assert.Equal(t, "tmp\nwork\n", string(res.Stdout), "a fresh in-memory root")

	res, err = g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond}}, "spin")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, -1, res.ExitCode)

	_, err = g.Run(ctx, "print(1)", nil)
	assert.ErrorIs(t, err, sandbox.ErrNotPython)
}

func TestCompileRejectsBadModules(t *testing.T) {
	ctx := context.Background()
	// A module importing something other than WASI.
	imp := []byte{0x01, 0x60, 0x00, 0x00}
	importSec := append([]byte{0x01, 0x03}, "env"...)
	importSec = append(importSec, 0x01, 'f', 0x00, 0x00)
	withEnvImport := (&wasmbin.Module{Sections: []wasmbin.Section{
		{ID: wasmbin.SectionType, Payload: imp},
		{ID: wasmbin.SectionImport, Payload: importSec},
	}}).Encode()
	// A valid module with no _start.
	noStart := (&wasmbin.Module{Sections: []wasmbin.Section{{ID: wasmbin.SectionType, Payload: imp}}}).Encode()

	cases := map[string][]byte{
		"empty":          nil,
		"text":           []byte("print('hello')"),
		"truncated":      testenv.BuildGo(t, "guests/testguest")[:5000],
		"garbage body":   append([]byte{0, 'a', 's', 'm', 1, 0, 0, 0}, 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"foreign import": withEnvImport,
		"no _start":      noStart,
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := sandbox.Compile(ctx, b, &sandbox.Options{CacheDir: t.TempDir()})
			require.ErrorIs(t, err, sandbox.ErrInvalidModule)
			assert.Nil(t, g)
		})
	}
}

func TestClosedGuest(t *testing.T) {
	g, err := sandbox.Compile(context.Background(), testenv.BuildGo(t, "guests/testguest"), nil)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, g.Close(), "closing twice is harmless")
	_, err = g.Exec(context.Background(), nil, "args", "x")
	require.Error(t, err)
	assert.True(t, errors.Is(err, sandbox.ErrClosed), "got %v", err)
}
