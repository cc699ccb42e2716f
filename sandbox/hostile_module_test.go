package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/sandbox"
)

// hostileModule describes a small hand-built WASI command: one function,
// _start, with the given locals and body, a memory of memPages pages and,
// if table is set, a table section with that payload.
type hostileModule struct {
	memPages uint32
	table    []byte // table section payload
	locals   []byte // the body's local declarations, with their count
	body     []byte // instructions, without the final end
	start    bool   // the start section names _start, so it runs at instantiation
}

func (h hostileModule) wasm() []byte {
	locals := h.locals
	if locals == nil {
		locals = []byte{0x00}
	}
	code := append(append(append([]byte{}, locals...), h.body...), 0x0B)
	secs := []wasmbin.Section{
		{ID: wasmbin.SectionType, Payload: []byte{0x01, 0x60, 0x00, 0x00}}, // () -> ()
		{ID: wasmbin.SectionFunction, Payload: []byte{0x01, 0x00}},
	}
	if h.table != nil {
		secs = append(secs, wasmbin.Section{ID: wasmbin.SectionTable, Payload: h.table})
	}
	secs = append(secs,
		wasmbin.Section{ID: wasmbin.SectionMemory, Payload: wasmbin.AppendU32([]byte{0x01, 0x00}, h.memPages)},
		wasmbin.Section{ID: wasmbin.SectionExport, Payload: append(append([]byte{0x01, 0x06}, "_start"...), 0x00, 0x00)},
	)
	if h.start {
		secs = append(secs, wasmbin.Section{ID: wasmbin.SectionStart, Payload: []byte{0x00}})
	}
	return (&wasmbin.Module{Sections: append(secs,
		wasmbin.Section{ID: wasmbin.SectionCode, Payload: append(wasmbin.AppendU32([]byte{0x01}, uint32(len(code))), code...)},
	)}).Encode()
}

func compileHostile(t *testing.T, h hostileModule, opts *sandbox.Options) (*sandbox.Guest, error) {
	t.Helper()
	g, err := sandbox.Compile(context.Background(), h.wasm(), opts)
	if err == nil {
		t.Cleanup(func() { g.Close() })
	}
	return g, err
}

// A module that declares more initial memory than the limit must not
// start: the allocator cannot refuse the first allocation, so this used to
// give a guest limited to 64 MiB a whole GiB of host memory.
func TestHugeInitialMemoryIsRefused(t *testing.T) {
	g, err := compileHostile(t, hostileModule{memPages: 16384}, nil) // 1 GiB
	require.NoError(t, err)
	res, err := g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}})
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	require.NotNil(t, res, "a limit gives a Result")
	assert.Equal(t, sandbox.StopMemory, res.Stop)
	assert.Equal(t, -1, res.ExitCode)
	assert.Zero(t, res.PeakMemory, "nothing was instantiated")
	assert.Zero(t, res.FuelUsed)

	// The 4 GiB maximum, with the default limit.
	g, err = compileHostile(t, hostileModule{memPages: 65536}, nil)
	require.NoError(t, err)
	_, err = g.Exec(context.Background(), nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)

	// A run whose own limit is large enough starts.
	g, err = compileHostile(t, hostileModule{memPages: 16}, nil)
	require.NoError(t, err)
	_, err = g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 512 << 10}})
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	res, err = g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 1 << 20}})
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), res.PeakMemory)
}

// A few bytes can declare billions of locals: wazero's compiler needs about
// 32 bytes of host memory for each, so 2^31 of them would exhaust the host
// while compiling. Compile refuses more than browsers allow.
func TestHugeLocalsAreRefused(t *testing.T) {
	locals := wasmbin.AppendU32([]byte{0x01}, 1<<31) // one group of 2^31 i64
	_, err := compileHostile(t, hostileModule{memPages: 1, locals: append(locals, 0x7E)}, nil)
	require.ErrorIs(t, err, sandbox.ErrInvalidModule)
	require.ErrorIs(t, err, wasmbin.ErrTooLarge)

	g, err := compileHostile(t, hostileModule{memPages: 1, locals: []byte{0x02, 0xA0, 0x9C, 0x01, 0x7E, 0x10, 0x7F}}, nil) // 20000 + 16
	require.NoError(t, err, "a large but sane number of locals")
	_, err = g.Exec(context.Background(), nil)
	require.NoError(t, err)
}

// table.grow allocates host memory outside the run's memory limit (8 bytes
// an element, up to 2^32 elements): a guest limited to 1 MiB of memory
// grew its table by 128 MiB. Compile gives every table a maximum, so the
// growth fails inside the guest.
func TestTableGrowthIsBounded(t *testing.T) {
	// growTrapIf grows the table by n and traps if the growth failed
	// (cmp 0x46, i32.eq -1) or succeeded (cmp 0x47, i32.ne -1).
	growTrapIf := func(n int32, cmp byte) []byte {
		b := wasmbin.AppendS32([]byte{0xD0, 0x70, 0x41}, n) // ref.null func, i32.const n
		// table.grow 0; i32.const -1; cmp; if unreachable end
		return append(b, 0xFC, 0x0F, 0x00, 0x41, 0x7F, cmp, 0x04, 0x40, 0x00, 0x0B)
	}
	const failed, succeeded = 0x46, 0x47
	table := []byte{0x01, 0x70, 0x00, 0x01} // one funcref table, min 1, no max
	g, err := compileHostile(t, hostileModule{memPages: 1, table: table, body: growTrapIf(1<<24, succeeded)}, nil)
	require.NoError(t, err)
	res, err := g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 1 << 20}})
	require.NoError(t, err, "the growth failed (returned -1)")
	assert.Equal(t, 0, res.ExitCode)

	// A modest growth still works.
	g, err = compileHostile(t, hostileModule{memPages: 1, table: table, body: growTrapIf(1000, failed)}, nil)
	require.NoError(t, err)
	_, err = g.Exec(context.Background(), nil)
	require.NoError(t, err, "growing by 1000 succeeded")

	// Tables that start too large are refused.
	for name, tab := range map[string][]byte{
		"one huge":  wasmbin.AppendU32([]byte{0x01, 0x70, 0x00}, 1<<27),
		"many big":  append([]byte{0x02, 0x70, 0x00, 0x80, 0x80, 0x30, 0x6F, 0x01}, 0x80, 0x80, 0x30, 0x80, 0x80, 0x30),
		"bad flags": {0x01, 0x70, 0x02, 0x01},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := compileHostile(t, hostileModule{memPages: 1, table: tab}, nil)
			require.ErrorIs(t, err, sandbox.ErrInvalidModule)
		})
	}
}

// pollModule calls poll_oneoff(in, out, n, result) and traps unless it
// returns the errno want.
func pollModule(in, out, n, result int32, want byte) []byte {
	name := "wasi_snapshot_preview1"
	imp := append(append([]byte{0x01, byte(len(name))}, name...), 11)
	imp = append(append(imp, "poll_oneoff"...), 0x00, 0x01)
	var body []byte
	for _, v := range []int32{in, out, n, result} {
		body = wasmbin.AppendS32(append(body, 0x41), v)
	}
	// call 0; i32.const want; i32.ne; if unreachable end; end
	body = append(body, 0x10, 0x00, 0x41, want, 0x47, 0x04, 0x40, 0x00, 0x0B, 0x0B)
	code := append([]byte{0x00}, body...)
	return (&wasmbin.Module{Sections: []wasmbin.Section{
		{ID: wasmbin.SectionType, Payload: []byte{0x02, 0x60, 0x00, 0x00, 0x60, 0x04, 0x7F, 0x7F, 0x7F, 0x7F, 0x01, 0x7F}},
		{ID: wasmbin.SectionImport, Payload: imp},
		{ID: wasmbin.SectionFunction, Payload: []byte{0x01, 0x00}},
		{ID: wasmbin.SectionMemory, Payload: []byte{0x01, 0x00, 0x01}},
		{ID: wasmbin.SectionExport, Payload: append(append([]byte{0x01, 0x06}, "_start"...), 0x00, 0x01)},
		{ID: wasmbin.SectionCode, Payload: append(wasmbin.AppendU32([]byte{0x01}, uint32(len(code))), code...)},
	}}).Encode()
}

// The host's own WASI function, poll_oneoff, given hostile pointers and
// counts, answers with an errno and never reads or writes outside the
// guest's memory.
func TestHostilePollOneoff(t *testing.T) {
	const fault, inval = 21, 28
	for name, c := range map[string]struct {
		in, out, n, result int32
		want               byte
	}{
		"no subscriptions":        {0, 0, 0, 0, inval},
		"count wraps to 32 bytes": {0, 0, 0x05555556, 0, fault},
		"count of 2^32-1":         {0, 0, -1, 0, fault},
		"input past memory":       {65536 - 8, 0, 1, 0, fault},
		"output past memory":      {0, 65536 - 8, 1, 0, fault},
		"negative pointer":        {-48, 0, 1, 0, fault},
		// Memory is zeroed: a subscription to the real-time clock, due now.
		"result past memory": {0, 1024, 1, 65535, fault},
		"a valid call":       {0, 1024, 1, 2048, 0},
	} {
		t.Run(name, func(t *testing.T) {
			g, err := sandbox.Compile(context.Background(), pollModule(c.in, c.out, c.n, c.result, c.want), nil)
			require.NoError(t, err)
			defer g.Close()
			_, err = g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 5 * time.Second}})
			require.NoError(t, err, "poll_oneoff returned another errno than %d", c.want)
		})
	}
}

// A module's code may name only its own globals. Code naming the index the
// rewriters give their own globals (fuel, errno) is invalid as written, and
// must stay invalid: if it were let through, `global.set` on the fuel
// global would refill the budget and defeat the watchdog's poison, so
// neither fuel nor the deadline could stop the loop below.
func TestCodeCannotReachTheMeteringGlobals(t *testing.T) {
	for _, idx := range []byte{0, 1, 2} {
		// loop: i64.const 2^40; global.set idx; br 0
		body := []byte{0x03, 0x40, 0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x24, idx, 0x0C, 0x00, 0x0B}
		_, err := compileHostile(t, hostileModule{memPages: 1, body: body}, nil)
		require.Error(t, err, "global %d", idx)
		assert.ErrorIs(t, err, sandbox.ErrInvalidModule, "global %d", idx)
		// global.get is refused too.
		_, err = compileHostile(t, hostileModule{memPages: 1, body: []byte{0x23, idx, 0x1A}}, nil)
		assert.ErrorIs(t, err, sandbox.ErrInvalidModule, "global.get %d", idx)
	}
}

// TestStartFunctionPaysFuel: a start function runs at instantiation,
// before the run arms its fuel. One that loops meets a fuel check there
// and is charged to the run's budget like any other code: it ends as
// ErrFuelExhausted, an error that names no host code, and with fuel to
// spare a start function that ends lets _start run.
func TestStartFunctionPaysFuel(t *testing.T) {
	loop := []byte{0x03, 0x40, 0x0C, 0x00, 0x0B} // loop br 0 end
	g, err := compileHostile(t, hostileModule{memPages: 1, body: loop, start: true}, nil)
	require.NoError(t, err)
	res, err := g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 1_000_000}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	require.NotNil(t, res)
	assert.Equal(t, sandbox.StopFuel, res.Stop)
	assert.GreaterOrEqual(t, res.FuelUsed, int64(1_000_000), "the start function's loop is charged")
	for _, host := range []string{"goroutine", ".go:", "runtime error", "nil pointer", "sandbox."} {
		assert.NotContains(t, strings.ReplaceAll(err.Error(), "sandbox: ", ""), host)
	}

	// Under a deadline and unlimited fuel, the deadline stops it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err = g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, sandbox.StopDeadline, res.Stop)

	// A start function that ends runs once, and so does _start after it.
	count := []byte{ // memory[0]++
		0x41, 0x00, 0x41, 0x00, 0x28, 0x02, 0x00, 0x41, 0x01, 0x6A, 0x36, 0x02, 0x00,
		// loop with a counter so that a fuel check runs: i = 100; loop i--; br_if i
		0x41, 0xE4, 0x00, 0x21, 0x00, 0x03, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6B, 0x22, 0x00, 0x0D, 0x00, 0x0B,
		// proc_exit is not imported: exit by returning
	}
	g, err = compileHostile(t, hostileModule{memPages: 1, locals: []byte{0x01, 0x01, 0x7F}, body: count, start: true}, nil)
	require.NoError(t, err)
	res, err = g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 1_000_000}})
	require.NoError(t, err)
	assert.Equal(t, sandbox.StopExit, res.Stop)
	assert.Greater(t, res.FuelUsed, int64(2*100), "both runs of the loop are charged")
}
