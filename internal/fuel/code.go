package fuel

import (
	"fmt"
	"math"
	"slices"

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

	// What scan knows of a region, for merging charges.
	exit   bool  // since the region (re)started, a branch may have left it
	sink   bool  // its cost may move to the regions in preds[predLo:predHi]
	predLo int32 // where its predecessors are in in.preds
	predHi int32
	ifR    int32 // a then arm: 1 + the region of its if, when that reaches the if
	elseR  int32 // a then arm: 1 + the region of its else arm, if any
}

const (
	evEntry  uint8 = iota // function entry: charge, then check
	evLoop                // loop header: charge at least 1, then check
	evRegion              // other region start: charge
	evFunc                // function index immediate to replace
)

// code instruments every function body of the code section.
//
// A first pass finds the cost of each function's entry region and whether
// the function calls any function. A function that no table,
// reference, export or start names is entered only by call and return_call:
// its callers pay for its entry region with the region that holds the
// call, so the callee charges nothing on entry. A function that calls none
// (not even an import, which could call back into the module) cannot take
// part in a recursion and needs no check on entry: it runs for a bounded
// time but for its loops, whose headers check.
func (in *instrumenter) code(payload []byte) ([]byte, error) {
	in.prepare()
	r := reader{B: payload}
	n := r.Count(2)
	bodies := r.Pos
	in.entryCost = make([]int64, n)
	in.calls = make([]bool, n)
	in.bodyCost = make([]int64, n)
	in.sites = make([][]site, n)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		body := r.Bytes(r.U32())
		if r.Err != nil {
			break
		}
		if _, err := in.function(body, -1); err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		in.entryCost[i] = in.events[0].val
		in.calls[i] = in.makesCalls
		in.bodyCost[i] = in.cost
		in.sites[i] = slices.Clone(in.scanSites)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	if uint32(len(in.funcTypes)) != n {
		return nil, fmt.Errorf("%w: %d function bodies for %d functions", wasmbin.ErrMalformed, n, len(in.funcTypes))
	}
	in.checks()
	r.Pos = bodies
	out := make([]byte, 0, len(payload)+len(payload)/4+64)
	out = append(out, payload[:r.Pos]...)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		body := r.Bytes(r.U32())
		if r.Err != nil {
			break
		}
		b, err := in.function(body, int(i))
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = wasmbin.AppendU32(out, uint32(len(b)))
		out = append(out, b...)
	}
	if r.Err == nil && r.Pos != len(r.B) {
		r.Fail("%d bytes after the last function body", len(r.B)-r.Pos)
	}
	return out, r.Err
}

// paidByCaller returns the entry cost of the function with input index
// idx if its callers pay it, else 0. It is 0 during the first pass.
func (in *instrumenter) paidByCaller(idx uint32) int64 {
	if idx < in.importedFuncs || in.entryCost == nil || in.escaped[idx] {
		return 0
	}
	if i := idx - in.importedFuncs; i < uint32(len(in.entryCost)) {
		return in.entryCost[i]
	}
	return 0
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

// function returns the instrumented copy of the body of defined function i
// (-1 in the first pass, which only scans). The result aliases in.body and
// is valid until the next call.
func (in *instrumenter) function(body []byte, i int) ([]byte, error) {
	r := reader{B: body}
	groups := r.Count(2)
	for j := uint32(0); j < groups && r.Err == nil; j++ {
		r.U32() // how many locals
		r.ValType()
	}
	if r.Err != nil {
		return nil, fmt.Errorf("locals: %w", r.Err)
	}
	expr := body[r.Pos:]
	in.makesCalls = false
	in.scanSites = in.scanSites[:0]
	if err := in.scan(expr); err != nil {
		return nil, err
	}
	if i < 0 {
		return nil, nil
	}
	// The first pass saw no callee costs, and merging only adds to the
	// entry region, so its cost then is at most its cost now.
	in.events[0].val -= in.paidByCaller(in.importedFuncs + uint32(i))
	in.entryCheck = in.checked[i]
	in.body = append(in.body[:0], body[:r.Pos]...)
	in.body = in.emit(in.body, expr)
	return in.body, nil
}

// scan decodes the expression of a function body and records in in.events
// where regions start, what each costs, and which function indices change.
// It then merges charges: see merge.
func (in *instrumenter) scan(expr []byte) error {
	ev := append(in.events[:0], event{kind: evEntry})
	in.preds = in.preds[:0]
	region := 0   // index in ev of the region being summed
	dead := false // the rest of the region is unreachable
	open := func(off int, kind uint8) {
		ev = append(ev, event{off: off, kind: kind})
		region = len(ev) - 1
		dead = false
	}
	frames := in.frames[:0]
	defer func() { in.frames = frames }()
	// branch records a branch from the current region to label; uncond
	// tells a br from a conditional or multi-way branch.
	branch := func(label uint32, uncond bool) {
		if label >= uint32(len(frames)) {
			return // to the function's end: a return
		}
		d := len(frames) - 1 - int(label)
		f := &frames[d]
		f.targeted = true
		if f.kind != frLoop {
			if uncond && !f.inexact {
				f.edges = append(f.edges, region)
				f.exact = f.exact && !ev[region].exit
			} else {
				f.inexact = true
			}
		}
		for i := d + 1; i < len(frames); i++ {
			frames[i].leaves = true
		}
	}
	leaveAll := func() {
		for i := range frames {
			frames[i].leaves = true
			frames[i].inexact = true
		}
	}
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
		case wasmbin.OpGlobalGet, wasmbin.OpGlobalSet:
			// Invalid as written, but valid once the fuel global exists:
			// code that could refill its own fuel is refused.
			if ins.Index >= in.fuelGlobal {
				return fmt.Errorf("%w: offset %d: global %d is not defined", wasmbin.ErrMalformed, pos, ins.Index)
			}
			ev[region].val++
		case wasmbin.OpNop, wasmbin.OpDrop:
		case wasmbin.OpBlock, wasmbin.OpLoop, wasmbin.OpTry, wasmbin.OpTryTable:
			if ins.Op == wasmbin.OpTryTable {
				// Each catch clause is a branch, from anywhere in the
				// body, to its label: a join where execution resumes.
				_, catches, err := wasmbin.TryTable(expr[pos:next])
				if err != nil {
					return fmt.Errorf("offset %d: %w", pos, err)
				}
				for _, c := range catches {
					branch(c.Label, false)
				}
			}
			f := frame{kind: frBlock, open: region, openExit: ev[region].exit || dead, exact: true}
			switch ins.Op {
			case wasmbin.OpLoop:
				f.kind = frLoop
			case wasmbin.OpTry, wasmbin.OpTryTable:
				f.kind = frTry
			}
			frames = append(frames, f)
			switch ins.Op {
			case wasmbin.OpLoop:
				open(next, evLoop)
			case wasmbin.OpTryTable:
				leaveAll() // its catch clauses branch to labels
			case wasmbin.OpTry:
				frames[len(frames)-1].leaves = true
				frames[len(frames)-1].inexact = true
			}
		case wasmbin.OpIf:
			ev[region].val++
			frames = append(frames, frame{kind: frIf, open: region, openExit: ev[region].exit || dead, exact: true})
			r := region
			open(next, evRegion)
			frames[len(frames)-1].then = region
			if !frames[len(frames)-1].openExit {
				ev[region].ifR = int32(r) + 1
			}
		case wasmbin.OpElse, wasmbin.OpCatch, wasmbin.OpCatchAll:
			if len(frames) == 0 {
				return fmt.Errorf("%w: offset %d: else or catch outside a block", wasmbin.ErrMalformed, pos)
			}
			f := &frames[len(frames)-1]
			if ins.Op != wasmbin.OpElse || f.kind != frIf {
				f.leaves, f.inexact = true, true
				open(next, evRegion)
				break
			}
			f.fallIn(ev, region, dead)
			open(next, evRegion)
			f.hasElse = true
			ev[f.then].elseR = int32(region) + 1
		case wasmbin.OpEnd, wasmbin.OpDelegate:
			if len(frames) == 0 {
				if ins.Op != wasmbin.OpEnd || next != len(expr) {
					return fmt.Errorf("%w: offset %d: unbalanced end or delegate", wasmbin.ErrMalformed, pos)
				}
				in.events = ev
				in.cost = 0
				for _, e := range ev {
					if e.kind != evFunc {
						in.cost += e.val
					}
				}
				in.merge()
				return nil
			}
			if ins.Op == wasmbin.OpDelegate {
				leaveAll()
			}
			f := frames[len(frames)-1]
			frames = frames[:len(frames)-1]
			if f.kind == frIf && !f.hasElse {
				f.inexact = true // the if's false edge
			}
			// Whether anything enters the code after the end.
			reached := !dead || f.kind != frLoop && (f.targeted || f.inexact)
			switch {
			case !f.leaves && !f.openExit && f.kind != frTry:
				// Whenever its opener reached the block, the code after
				// it runs: it continues the opener's region.
				f.fallIn(ev, region, dead)
				region, dead = f.open, !reached
				ev[region].exit = false
			case f.kind == frBlock && !f.targeted:
				// Reached only by falling through: the region runs on.
			default:
				f.fallIn(ev, region, dead)
				open(next, evRegion)
				dead = !reached
				if !f.inexact && f.exact {
					e := &ev[region]
					e.sink = true
					e.predLo = int32(len(in.preds))
					in.preds = append(in.preds, f.edges...)
					e.predHi = int32(len(in.preds))
				}
			}
		case opBr:
			ev[region].val++
			branch(ins.Index, true)
			ev[region].exit, dead = true, true
		case opBrIf:
			ev[region].val++
			branch(ins.Index, false)
			ev[region].exit = true
		case opBrTable:
			ev[region].val++
			if err := brTableTargets(expr[pos+1:next], func(l uint32) { branch(l, false) }); err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
			ev[region].exit, dead = true, true
		case opBrOnNull, opBrOnNonNull:
			ev[region].val++
			leaveAll()
			ev[region].exit = true
		case opRet, opThrow, opRethrow, opThrowRef:
			ev[region].val++
			leaveAll()
			ev[region].exit, dead = true, true
		case wasmbin.OpUnreachable:
			ev[region].val++
			dead = true
		case wasmbin.OpCall, wasmbin.OpReturnCall, wasmbin.OpRefFunc:
			ev[region].val++
			if ins.Op != wasmbin.OpRefFunc {
				in.makesCalls = true
			}
			if ins.Op == wasmbin.OpReturnCall {
				leaveAll()
				ev[region].exit, dead = true, true
			}
			if ins.Index >= in.importedFuncs {
				if ins.Op == wasmbin.OpRefFunc {
					in.escape(ins.Index)
				} else {
					ev[region].val += in.paidByCaller(ins.Index)
					in.scanSites = append(in.scanSites, site{callee: ins.Index})
				}
				if ins.Index == math.MaxUint32 {
					return fmt.Errorf("%w: function index %d out of range", wasmbin.ErrMalformed, ins.Index)
				}
				ev = append(ev, event{off: pos + 1, n: ins.Len - 1, val: int64(ins.Index + 1), kind: evFunc})
			} else if ins.Op != wasmbin.OpRefFunc {
				in.scanSites = append(in.scanSites, site{callee: ins.Index})
			}
		case opCallIndirect, opCallRef:
			ev[region].val++
			in.makesCalls = true
			in.indirectSite(ins)
		case opReturnCallIndirect, opReturnCallRef:
			ev[region].val++
			in.makesCalls = true
			in.indirectSite(ins)
			leaveAll()
			ev[region].exit, dead = true, true
		default:
			ev[region].val++
		}
		pos = next
	}
}

// merge moves charges to earlier regions where that charges the same or
// more on every path, so that fewer charges run:
//
//   - A region that starts after the end of a block, if or loop, whose every
//     entry is a br or a fall through from a region that reaches that br or
//     end whenever it runs, is charged in each of those regions instead.
//   - Of the two arms of an if whose region reaches the if whenever it runs,
//     the cheaper arm's cost is charged in the if's region and subtracted from
//     both arms.
//
// Costs only move backwards within one pass through a function body or loop
// body, so every loop iteration still pays at its header, and a region's
// cost is paid before or when it runs.
func (in *instrumenter) merge() {
	ev := in.events
	for j := len(ev) - 1; j > 0; j-- {
		e := &ev[j]
		if e.kind != evRegion {
			continue
		}
		if e.sink && e.predHi > e.predLo && e.val > 0 {
			for _, p := range in.preds[e.predLo:e.predHi] {
				ev[p].val += e.val
			}
			e.val = 0
		}
		if e.ifR > 0 && e.elseR > 0 {
			el := &ev[e.elseR-1]
			m := min(e.val, el.val)
			ev[e.ifR-1].val += m
			e.val -= m
			el.val -= m
		}
	}
}

// frame is an open block, loop, if or try during scan.
type frame struct {
	kind     uint8
	targeted bool  // some branch targets its label
	hasElse  bool  // an if with an else arm
	leaves   bool  // code inside may leave it other than through its end
	inexact  bool  // its end has an entry other than a br or a fall through
	exact    bool  // every region in edges reaches its entry whenever it runs
	openExit bool  // the region that opened it might not have reached it
	open     int   // the region that opened it
	then     int   // an if: the region of its then arm
	edges    []int // regions that enter its end
}

// fallIn records the entry into f's end by falling through from region.
func (f *frame) fallIn(ev []event, region int, dead bool) {
	if dead {
		return
	}
	f.edges = append(f.edges, region)
	f.exact = f.exact && !ev[region].exit
}

// Kinds of frame.
const (
	frBlock uint8 = iota
	frLoop
	frIf
	frTry
)

// Branch instructions whose targets decide where regions start.
const (
	opBr          wasmbin.Opcode = 0x0C
	opBrIf        wasmbin.Opcode = 0x0D
	opBrTable     wasmbin.Opcode = 0x0E
	opBrOnNull    wasmbin.Opcode = 0xD5
	opBrOnNonNull wasmbin.Opcode = 0xD6

	opRet                wasmbin.Opcode = 0x0F
	opThrow              wasmbin.Opcode = 0x08
	opRethrow            wasmbin.Opcode = 0x09
	opThrowRef           wasmbin.Opcode = 0x0A
	opCallIndirect       wasmbin.Opcode = 0x11
	opCallRef            wasmbin.Opcode = 0x14
	opReturnCallIndirect wasmbin.Opcode = 0x13
	opReturnCallRef      wasmbin.Opcode = 0x15
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
			if in.entryCheck {
				out = append(out, in.check...)
			}
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

// indirectSite records an indirect call for the first pass.
func (in *instrumenter) indirectSite(ins wasmbin.Instr) {
	t := ins.Index
	if ins.Op == opCallRef || ins.Op == opReturnCallRef {
		t = anyType
	}
	in.scanSites = append(in.scanSites, site{callee: t, indirect: true})
}
