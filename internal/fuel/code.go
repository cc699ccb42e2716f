package fuel

import (
	"fmt"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// An event is a place in a function's expression where the output differs
// from the input. Events are recorded in order of offset by scan and applied
// by emit.
type event struct {
	off  int   // offset in the expression
	n    int   // evFunc: length of the index being replaced
	val  int64 // region cost, or the new function index
	kind uint8
}

const (
	evEntry  uint8 = iota // function entry: charge, then check
	evLoop                // loop header: charge at least 1, then check
	evRegion              // other region start: charge
	evFunc                // function index immediate to replace
)

// code instruments every function body of the code section.
func (in *instrumenter) code(payload []byte) ([]byte, error) {
	in.prepare()
	r := reader{b: payload}
	n := r.count(2)
	out := make([]byte, 0, len(payload)+len(payload)/4+64)
	out = append(out, payload[:r.pos]...)
	for i := uint32(0); i < n && r.err == nil; i++ {
		body := r.bytes(r.u32())
		if r.err != nil {
			break
		}
		b, err := in.function(body)
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = wasmbin.AppendU32(out, uint32(len(b)))
		out = append(out, b...)
	}
	if r.err == nil && r.pos != len(r.b) {
		r.fail("%d bytes after the last function body", len(r.b)-r.pos)
	}
	return out, r.err
}

// prepare builds the instruction sequences that the instrumentation inserts.
func (in *instrumenter) prepare() {
	in.charge = append(in.charge[:0], opGlobalGet)
	in.charge = wasmbin.AppendU32(in.charge, in.fuelGlobal)
	in.charge = append(in.charge, opI64Const)

	in.sub = append(in.sub[:0], 0x7D, opGlobalSet) // i64.sub
	in.sub = wasmbin.AppendU32(in.sub, in.fuelGlobal)

	in.check = append(in.check[:0], opGlobalGet)
	in.check = wasmbin.AppendU32(in.check, in.fuelGlobal)
	in.check = append(in.check,
		opI64Const, 0,
		0x53,       // i64.lt_s
		0x04, 0x40, // if (empty block type)
		0x10, // call out_of_fuel
	)
	in.check = wasmbin.AppendU32(in.check, in.importedFuncs)
	in.check = append(in.check, opEnd)
}

// function returns the instrumented copy of one function body. The result
// aliases in.body and is valid until the next call.
func (in *instrumenter) function(body []byte) ([]byte, error) {
	r := reader{b: body}
	groups := r.count(2)
	for j := uint32(0); j < groups && r.err == nil; j++ {
		r.u32() // how many locals
		r.valType()
	}
	if r.err != nil {
		return nil, fmt.Errorf("locals: %w", r.err)
	}
	expr := body[r.pos:]
	if err := in.scan(expr); err != nil {
		return nil, err
	}
	in.body = append(in.body[:0], body[:r.pos]...)
	in.body = in.emit(in.body, expr)
	return in.body, nil
}

// scan decodes the expression of a function body and records in in.events
// where regions start, what each costs, and which function indices change.
func (in *instrumenter) scan(expr []byte) error {
	ev := append(in.events[:0], event{kind: evEntry})
	region := 0 // index in ev of the region being summed
	open := func(off int, kind uint8) {
		ev = append(ev, event{off: off, kind: kind})
		region = len(ev) - 1
	}
	// The open blocks, innermost last: whether each is a plain block and
	// whether a branch targets it. The code after the end of a plain block
	// that no branch targets is reached only by falling through, so it
	// stays in the region it falls from instead of paying for a charge of
	// its own; every other end starts a region.
	frames := in.frames[:0]
	target := func(label uint32) {
		if label < uint32(len(frames)) {
			frames[len(frames)-1-int(label)].targeted = true
		}
	}
	targetAll := func() {
		for i := range frames {
			frames[i].targeted = true
		}
	}
	defer func() { in.frames = frames }()
	depth := 0
	for pos := 0; ; {
		if pos >= len(expr) {
			return fmt.Errorf("%w: function body ends before its end instruction", wasmbin.ErrMalformed)
		}
		ins, err := wasmbin.DecodeInstr(expr[pos:])
		if err != nil {
			return fmt.Errorf("offset %d: %w", pos, err)
		}
		next := pos + ins.Len
		switch ins.Op {
		case wasmbin.OpNop, wasmbin.OpDrop:
		case wasmbin.OpBlock:
			depth++
			frames = append(frames, frame{block: true})
		case wasmbin.OpTry, wasmbin.OpTryTable:
			depth++
			frames = append(frames, frame{})
			if ins.Op == wasmbin.OpTryTable {
				targetAll() // its catch clauses branch to labels
			}
		case wasmbin.OpLoop:
			depth++
			frames = append(frames, frame{})
			open(next, evLoop)
		case wasmbin.OpIf:
			ev[region].val++
			depth++
			frames = append(frames, frame{})
			open(next, evRegion)
		case wasmbin.OpElse, wasmbin.OpCatch, wasmbin.OpCatchAll:
			open(next, evRegion)
		case wasmbin.OpEnd, wasmbin.OpDelegate:
			if depth == 0 {
				if ins.Op != wasmbin.OpEnd || next != len(expr) {
					return fmt.Errorf("%w: offset %d: unbalanced end or delegate", wasmbin.ErrMalformed, pos)
				}
				in.events = ev
				return nil
			}
			depth--
			f := frames[len(frames)-1]
			frames = frames[:len(frames)-1]
			if ins.Op == wasmbin.OpDelegate {
				targetAll()
			}
			if !f.block || f.targeted {
				open(next, evRegion)
			}
		case opBr, opBrIf:
			ev[region].val++
			target(ins.Index)
		case opBrTable:
			ev[region].val++
			if err := brTableTargets(expr[pos+1:next], target); err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
		case opBrOnNull, opBrOnNonNull:
			ev[region].val++
			targetAll()
		case wasmbin.OpCall, wasmbin.OpReturnCall, wasmbin.OpRefFunc:
			ev[region].val++
			if ins.Index >= in.importedFuncs {
				idx, err := in.funcIndex(ins.Index)
				if err != nil {
					return err
				}
				ev = append(ev, event{off: pos + 1, n: ins.Len - 1, val: int64(idx), kind: evFunc})
			}
		default:
			ev[region].val++
		}
		pos = next
	}
}

// frame is an open block, loop, if or try during scan.
type frame struct {
	block    bool // a plain block
	targeted bool // some branch targets its label
}

// Branch instructions whose targets decide where regions start.
const (
	opBr          wasmbin.Opcode = 0x0C
	opBrIf        wasmbin.Opcode = 0x0D
	opBrTable     wasmbin.Opcode = 0x0E
	opBrOnNull    wasmbin.Opcode = 0xD5
	opBrOnNonNull wasmbin.Opcode = 0xD6
)

// brTableTargets calls target for each label of a br_table's immediates.
func brTableTargets(imm []byte, target func(uint32)) error {
	count, n, err := wasmbin.U32(imm)
	if err != nil {
		return err
	}
	pos := n
	for i := uint64(0); i <= uint64(count); i++ {
		label, n, err := wasmbin.U32(imm[pos:])
		if err != nil {
			return err
		}
		target(label)
		pos += n
	}
	return nil
}

// emit appends to out the expression with the events in in.events applied.
func (in *instrumenter) emit(out, expr []byte) []byte {
	prev := 0
	for _, e := range in.events {
		out = append(out, expr[prev:e.off]...)
		prev = e.off
		switch e.kind {
		case evFunc:
			out = wasmbin.AppendU32(out, uint32(e.val))
			prev += e.n
		case evEntry:
			if e.val > 0 {
				out = in.appendCharge(out, e.val)
			}
			out = append(out, in.check...)
		case evLoop:
			out = in.appendCharge(out, max(e.val, 1))
			out = append(out, in.check...)
		case evRegion:
			if e.val > 0 {
				out = in.appendCharge(out, e.val)
			}
		}
	}
	return append(out, expr[prev:]...)
}

func (in *instrumenter) appendCharge(out []byte, cost int64) []byte {
	out = append(out, in.charge...)
	out = wasmbin.AppendS64(out, cost)
	return append(out, in.sub...)
}
