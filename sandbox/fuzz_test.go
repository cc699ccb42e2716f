package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// FuzzCompile checks that Compile, given any bytes, returns a guest or an
// error matching ErrInvalidModule, never panics, and that a guest it
// returns runs to one of the documented outcomes under small limits.
func FuzzCompile(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(hostileModule{memPages: 1}.wasm())
	f.Add(hostileModule{memPages: 2, table: []byte{0x01, 0x70, 0x00, 0x01}, body: []byte{0x03, 0x40, 0x0C, 0x00, 0x0B}}.wasm()) // loop br 0
	f.Add(hostileModule{memPages: 1, body: []byte{0x00}}.wasm())                                                                // unreachable
	f.Add(hostileModule{memPages: 1, body: []byte{0x41, 0x01, 0x40, 0x00, 0x1A}}.wasm())                                        // memory.grow 1
	f.Add(pollModule(0, 1024, 1, 2048, 0))
	cache := f.TempDir()
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, wasm []byte) {
		g, err := sandbox.Compile(ctx, wasm, &sandbox.Options{CacheDir: cache})
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalidModule) {
				t.Fatalf("Compile: %v, not ErrInvalidModule", err)
			}
			return
		}
		defer g.Close()
		_, err = g.Exec(ctx, &sandbox.RunOptions{StopAtOutputLimit: true, Limits: sandbox.Limits{Fuel: 10_000_000, Timeout: 2 * time.Second, MaxOutput: 1024, Memory: 4 << 20}})
		var exit *sandbox.ExitError
		var trap *sandbox.TrapError
		switch {
		case err == nil, errors.As(err, &exit), errors.As(err, &trap),
			errors.Is(err, sandbox.ErrFuelExhausted), errors.Is(err, sandbox.ErrMemoryLimit),
			errors.Is(err, sandbox.ErrOutputLimit), errors.Is(err, context.DeadlineExceeded):
		default:
			t.Fatalf("Exec: %v, not a documented outcome", err)
		}
		if errors.Is(err, sandbox.ErrInternal) {
			t.Fatalf("Exec: %v", err)
		}
	})
}
