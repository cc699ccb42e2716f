// Package pydriver is the host's side of the CPython guest's driver
// (guests/cpython: cdriver/fhdriver.c and python/driver): it attaches to an
// instance's entry points, starts the interpreter once, sends each run's
// request and decodes its outcome. The guest is built by package cpython;
// package sandbox runs every Python run, one-shot or session, through it.
package pydriver

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/textcut"
)

// The built guest exports, beside _start, the entry points of fumehood's
// driver (guests/cpython/cdriver/fhdriver.c): the host starts the interpreter once with
// fumehood_init, keeps the instance (or its memory, as an image other
// instances start from), and runs each request with fumehood_exec, with
// nothing to unwind between requests. [Driver] is the host's
// side of those calls.

// The driver's exports.
const (
	// ExportAlloc is fumehood_alloc(n i32) -> ptr i32: malloc.
	ExportAlloc = "fumehood_alloc"
	// ExportFree is fumehood_free(ptr i32): free.
	ExportFree = "fumehood_free"
	// ExportRequest is fumehood_request(n i32) -> ptr i32: a buffer of at
	// least n bytes that the driver keeps, for requests.
	ExportRequest = "fumehood_request"
	// ExportInit is fumehood_init(src i32, n i32) -> rc i32: starts the
	// interpreter and runs the driver's Python side.
	ExportInit = "fumehood_init"
	// ExportExec is fumehood_exec(req i32, n i32) -> p i32: runs one
	// request; p is the address of the outcome's address and length.
	ExportExec = "fumehood_exec"
)

// DriverPython is the driver's Python side (driverrun.py, then fhdriver.py,
// from cpython.Code),
// which fumehood_init runs: it defines fumehood_exec, which runs a request
// (the session driver's JSON request) and returns the outcome in the
// format DecodeOutcome reads. Other start-up code may precede it.
var DriverPython = driverRun + fhdriverPython

// driverRun is how the driver runs a request (driverrun.py's
// _fumehood_runner); fhdriverPython the rest of the driver's Python side.
var (
	driverRun      = guestFile("python/driver/driverrun.py")
	fhdriverPython = guestFile("python/driver/fhdriver.py")
)

// guestFile is a file of cpython.Code.
func guestFile(name string) string {
	b, err := fs.ReadFile(cpython.Code, name)
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return string(b)
}

// ErrNoDriver reports a module without the driver's exports (any other
// WASI program, or a build from before the driver).
var ErrNoDriver = errors.New("cpython: the module does not export the driver's entry points")

// ErrDriver reports that the driver failed: fumehood_init returned an
// error (its message is on the instance's stderr), fumehood_exec found no
// interpreter or its Python side failed, or the guest ran out of memory for
// the request.
var ErrDriver = errors.New("cpython: the driver failed")

// ErrOutcomeCorrupt reports an outcome that does not decode: only the
// guest's own code can have made it so.
var ErrOutcomeCorrupt = errors.New("cpython: corrupt outcome")

// signatures of the driver's exports.
var driverSigs = map[string][2][]api.ValueType{
	ExportAlloc:   {{api.ValueTypeI32}, {api.ValueTypeI32}},
	ExportFree:    {{api.ValueTypeI32}, nil},
	ExportRequest: {{api.ValueTypeI32}, {api.ValueTypeI32}},
	ExportInit:    {{api.ValueTypeI32, api.ValueTypeI32}, {api.ValueTypeI32}},
	ExportExec:    {{api.ValueTypeI32, api.ValueTypeI32}, {api.ValueTypeI32}},
}

// HasDriver reports whether a compiled module exports the driver's entry
// points with their signatures.
func HasDriver(m wazero.CompiledModule) bool {
	defs := m.ExportedFunctions()
	for name, sig := range driverSigs {
		d, ok := defs[name]
		if !ok || !sameTypes(d.ParamTypes(), sig[0]) || !sameTypes(d.ResultTypes(), sig[1]) {
			return false
		}
	}
	return true
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Driver calls the driver's entry points of one instance. It is not safe
// for concurrent use (nor is the instance).
type Driver struct {
	mod                              api.Module
	alloc, free, request, init, exec api.Function
	// req and reqCap are the request buffer fumehood_request gave last:
	// a request that fits needs no call to get one.
	req, reqCap uint32
}

// Attach returns the Driver of an instance of the built guest, or an error
// matching ErrNoDriver. The instance must not have run _start.
func Attach(mod api.Module) (*Driver, error) {
	d := &Driver{mod: mod}
	for name, f := range map[string]*api.Function{ExportAlloc: &d.alloc, ExportFree: &d.free, ExportRequest: &d.request, ExportInit: &d.init, ExportExec: &d.exec} {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			return nil, fmt.Errorf("%w: no %s", ErrNoDriver, name)
		}
		sig := driverSigs[name]
		if def := fn.Definition(); !sameTypes(def.ParamTypes(), sig[0]) || !sameTypes(def.ResultTypes(), sig[1]) {
			return nil, fmt.Errorf("%w: %s has another signature", ErrNoDriver, name)
		}
		*f = fn
	}
	if mod.Memory() == nil {
		return nil, fmt.Errorf("%w: no memory", ErrNoDriver)
	}
	return d, nil
}

// Init starts the interpreter and runs src, the driver's Python side
// (DriverPython, possibly preceded by other start-up code). An error
// matching ErrDriver means the interpreter printed why on stderr; an error
// from the call itself (the guest exited, trapped, or the host stopped it)
// is returned wrapped. Either way the instance is of no further use.
func (d *Driver) Init(ctx context.Context, src []byte) error {
	p, err := d.put(ctx, src)
	if err != nil {
		return err
	}
	res, err := d.init.Call(ctx, uint64(p), uint64(len(src)))
	if err != nil {
		return fmt.Errorf("cpython: %s: %w", ExportInit, err)
	}
	if _, err := d.free.Call(ctx, uint64(p)); err != nil {
		return fmt.Errorf("cpython: %s: %w", ExportFree, err)
	}
	if rc := int32(res[0]); rc != 0 {
		return fmt.Errorf("%w: %s returned %d", ErrDriver, ExportInit, rc)
	}
	return nil
}

// put copies b into a buffer fumehood_alloc returns.
func (d *Driver) put(ctx context.Context, b []byte) (uint32, error) {
	if uint64(len(b)) > 1<<31 {
		return 0, fmt.Errorf("%w: %d bytes do not fit", ErrDriver, len(b))
	}
	res, err := d.alloc.Call(ctx, uint64(len(b)))
	if err != nil {
		return 0, fmt.Errorf("cpython: %s: %w", ExportAlloc, err)
	}
	p := uint32(res[0])
	if p == 0 {
		return 0, fmt.Errorf("%w: the guest has no memory for %d bytes", ErrDriver, len(b))
	}
	if !d.mod.Memory().Write(p, b) {
		return 0, fmt.Errorf("%w: %s returned %#x, outside memory", ErrDriver, ExportAlloc, p)
	}
	return p, nil
}

// Request is a request to the driver's Python side: sandbox's session
// request, less the result path. Zero fields are left out.
type Request struct {
	// Code is the Python source to run.
	Code string `json:"code"`
	// N numbers the run: the code's file name in tracebacks is <run-N>.
	N int `json:"n,omitempty"`
	// Env, if not nil, replaces the environment.
	Env map[string]string `json:"env,omitempty"`
	// Seed, hex, reseeds random (a new session, a fork, a resume).
	Seed string `json:"seed,omitempty"`
	// MaxValue makes the guest cut each text to MaxValue+1 bytes (only to
	// save copying: DecodeOutcome's limit is the bound).
	MaxValue *int `json:"max_value,omitempty"`
}

// Exec runs one request (JSON, as Request encodes) and decodes its
// outcome, cutting each text at limit bytes. The code's output goes to the
// instance's stdout and stderr, and its stdin is the instance's. An error
// from the call (the guest exited, trapped, or the host stopped it) is
// returned wrapped: the instance is then of no further use, and the caller
// starts again from its image.
func (d *Driver) Exec(ctx context.Context, req []byte, limit int) (*Outcome, error) {
	if uint64(len(req)) > 1<<31 {
		return nil, fmt.Errorf("%w: a request of %d bytes does not fit", ErrDriver, len(req))
	}
	n := uint32(len(req))
	if n > d.reqCap || d.req == 0 {
		res, err := d.request.Call(ctx, uint64(n))
		if err != nil {
			return nil, fmt.Errorf("cpython: %s: %w", ExportRequest, err)
		}
		if d.req = uint32(res[0]); d.req == 0 {
			d.reqCap = 0
			return nil, fmt.Errorf("%w: the guest has no memory for a request of %d bytes", ErrDriver, n)
		}
		d.reqCap = n
	}
	if !d.mod.Memory().Write(d.req, req) {
		p := d.req
		d.req, d.reqCap = 0, 0
		return nil, fmt.Errorf("%w: %s returned %#x, outside memory", ErrDriver, ExportRequest, p)
	}
	res, err := d.exec.Call(ctx, uint64(d.req), uint64(n))
	if err != nil {
		return nil, fmt.Errorf("cpython: %s: %w", ExportExec, err)
	}
	r := uint32(res[0])
	if r == 0 {
		return nil, fmt.Errorf("%w: %s failed", ErrDriver, ExportExec)
	}
	mem := d.mod.Memory()
	loc, ok := mem.Read(r, 8)
	if !ok {
		return nil, fmt.Errorf("%w: result at %#x is outside memory", ErrOutcomeCorrupt, r)
	}
	at, n := binary.LittleEndian.Uint32(loc), binary.LittleEndian.Uint32(loc[4:])
	view, ok := mem.Read(at, n)
	if !ok {
		return nil, fmt.Errorf("%w: %d bytes at %#x are outside memory", ErrOutcomeCorrupt, n, at)
	}
	// view aliases guest memory: DecodeOutcome copies what it keeps.
	return DecodeOutcome(view, limit)
}

// Outcome is what a request's run returned.
type Outcome struct {
	// HasValue says the code's last statement was an expression whose
	// value was not None; Value is its repr.
	HasValue bool
	Value    string
	// Exception, if not nil, is the exception the code raised.
	Exception *Exception
	// Exit is the status of a SystemExit the code raised, from 0 to 255
	// (see ExitCode).
	Exit *int
	// Truncated says a text was cut at the limit.
	Truncated bool
}

// Exception is an exception as data.
type Exception struct {
	// Type is the exception's qualified name (module-qualified outside
	// builtins), Message its str(), Traceback the formatted traceback
	// without the driver's frames.
	Type, Message, Traceback string
}

// outcomeMeta is the outcome's JSON part, sandbox/outcome.go's outcome.
type outcomeMeta struct {
	Value     bool      `json:"value"`
	Exception bool      `json:"exception"`
	Exit      *ExitCode `json:"exit"`
}

// ExitCode is the exit status of a SystemExit in an outcome's JSON, as a
// POSIX parent sees a CPython process that exits with it: a JSON integer
// of any size, n, is n's low 8 bits when n fits in 64 bits, and 255 when
// it does not (CPython's exit passes -1 for a code past a long long). The
// drivers send it so already; the host does not rely on them.
type ExitCode int

// UnmarshalJSON reads a JSON integer of any size as an ExitCode.
func (c *ExitCode) UnmarshalJSON(b []byte) error {
	n, ok := new(big.Int).SetString(string(b), 10)
	if !ok {
		return fmt.Errorf("the exit status %.32q is not an integer", b)
	}
	if !n.IsInt64() {
		*c = 255
		return nil
	}
	*c = ExitCode(n.Int64() & 0xff)
	return nil
}

// plainOutcome is the JSON part of an outcome with no value, no exception
// and no exit, as fhdriver.py's pack writes it.
const plainOutcome = `{"value": false, "exception": false, "exit": null}`

// maxOutcomeMeta bounds the JSON part: the driver's is a few dozen bytes.
const maxOutcomeMeta = 4 << 10

// DecodeOutcome decodes an outcome: five parts, each a little-endian u32
// length and that many bytes (the JSON outcome, then the value's repr and
// the exception's type, message and traceback). Every text is cut at limit
// bytes (at a character boundary; invalid UTF-8 is replaced), and nothing
// is allocated beyond what it returns. A malformed outcome matches
// ErrOutcomeCorrupt.
func DecodeOutcome(b []byte, limit int) (*Outcome, error) {
	var parts [5][]byte
	for i := range parts {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: %d of 5 parts", ErrOutcomeCorrupt, i)
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(n) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: part %d is %d bytes, %d left", ErrOutcomeCorrupt, i, n, len(b))
		}
		parts[i], b = b[:n], b[n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the outcome", ErrOutcomeCorrupt, len(b))
	}
	if len(parts[0]) > maxOutcomeMeta {
		return nil, fmt.Errorf("%w: the JSON part is %d bytes", ErrOutcomeCorrupt, len(parts[0]))
	}
	var meta outcomeMeta
	// Most runs return no value, raise nothing and do not exit: the
	// driver's JSON for that, as its pack writes it, needs no decoder.
	if string(parts[0]) != plainOutcome {
		if err := json.Unmarshal(parts[0], &meta); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOutcomeCorrupt, err)
		}
	}
	o := &Outcome{}
	if meta.Exit != nil {
		o.Exit = new(int)
		*o.Exit = int(*meta.Exit)
	}
	text := func(b []byte) string {
		s, cut := textcut.Cut(string(b[:min(len(b), max(limit, 0)+1)]), limit)
		o.Truncated = o.Truncated || cut
		return s
	}
	if meta.Value {
		o.HasValue, o.Value = true, text(parts[1])
	}
	if meta.Exception {
		o.Exception = &Exception{Type: text(parts[2]), Message: text(parts[3]), Traceback: text(parts[4])}
	}
	return o, nil
}
