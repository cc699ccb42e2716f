package exnref

import (
	"fmt"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// The function-level pseudo-frame's offset: delegate's label for the
// caller, and the key of the function body's delegate target.
const funcLevel = -1

// tryInfo is what the first pass learns of one legacy try, by offset.
type tryInfo struct {
	clauses  []int64 // each catch's tag index, -1 for catch_all
	delegate bool    // it ends with delegate
	target   int     // delegate: the offset of the try it delegates to, or funcLevel
	rethrown bool    // some rethrow names it
	targeted bool    // some delegate targets its body
}

// frame is an open block of the input during either pass.
type frame struct {
	kind    byte // the opcode that opened it
	off     int  // the offset of that opcode, funcLevel for the function
	handler bool // a try in one of its catch handlers
	depth   int  // a try: how many tries enclose it

	// Second pass: positions in the output's control stack (0 is the
	// outermost block, -1 the function's label).
	target  int  // where a branch to its label goes
	xPos    int  // a delegate target: the block its body leaves through
	dPos    int  // a delegate target: the block delegated exceptions reach
	wrapped bool // a delegate target whose $x and $d blocks are open
}

// fn is the state of one function's translation.
type fn struct {
	tries  map[int]*tryInfo
	frames []frame
	height int // the output's control stack height
	exnBase,
	maxDepth uint32
	rethrows bool
	out      []byte

	// The work-around for wazero's locals in handlers (see spill.go).
	localTypes []localGroup     // the types of the function's locals
	written    map[int][]uint32 // by catch try: the spilled locals its body writes
	slots      map[uint32]slot  // by spilled local: its place in the spill area
	spillSize  uint32
	sp         uint32 // the stack pointer global
	base       uint32 // the local holding the spill area's address
	bodies     int    // the catch tries whose body is open, during emit
}

// function returns the translated body, or false if it has no legacy
// instructions.
func (t *translator) function(body []byte, typeIdx uint32) ([]byte, bool, error) {
	r := wasmbin.Reader{B: body}
	groups := r.Count(2)
	locals := uint64(0)
	if typeIdx < uint32(len(t.sigs)) {
		locals = uint64(len(t.sigs[typeIdx].params))
	}
	var types []localGroup
	if typeIdx < uint32(len(t.sigs)) {
		for _, p := range t.sigs[typeIdx].params {
			types = append(types, localGroup{end: uint64(len(types)) + 1, typ: p[0]})
		}
	}
	for j := uint32(0); j < groups && r.Err == nil; j++ {
		locals += uint64(r.U32())
		types = append(types, localGroup{end: locals, typ: r.ValType()})
	}
	if r.Err != nil {
		return nil, false, fmt.Errorf("locals: %w", r.Err)
	}
	header := body[:r.Pos]
	expr := body[r.Pos:]
	t.f = fn{tries: map[int]*tryInfo{}, localTypes: types}
	f := &t.f
	legacy, err := t.scan(expr)
	if err != nil || !legacy {
		return nil, false, err
	}
	if err := t.planSpill(expr); err != nil {
		return nil, false, err
	}
	if typeIdx >= uint32(len(t.sigs)) {
		return nil, false, fmt.Errorf("%w: function type %d is not defined", wasmbin.ErrMalformed, typeIdx)
	}
	f.out = make([]byte, 0, len(body)+len(body)/4+16)
	// New locals: the exnrefs, then the spill area's address.
	added := uint64(0)
	newGroups := groups
	if f.rethrows {
		added += uint64(f.maxDepth) + 1
		newGroups++
	}
	if f.spillSize > 0 {
		added++
		newGroups++
	}
	if locals+added > 1<<32-1 {
		return nil, false, fmt.Errorf("%w: too many locals", wasmbin.ErrMalformed)
	}
	f.exnBase = uint32(locals)
	f.base = uint32(locals + added - 1)
	f.out = wasmbin.AppendU32(f.out, newGroups)
	_, n, _ := wasmbin.U32(header)
	f.out = append(f.out, header[n:]...)
	if f.rethrows {
		f.out = wasmbin.AppendU32(f.out, f.maxDepth+1)
		f.out = append(f.out, valExnref)
	}
	if f.spillSize > 0 {
		f.out = append(f.out, 1, valI32)
	}
	if err := t.emit(expr, t.sigs[typeIdx].results); err != nil {
		return nil, false, err
	}
	return f.out, true, nil
}

// scan is the first pass: it finds each try's clauses, which tries are
// rethrown and which bodies are delegate targets, and reports whether the
// expression holds any legacy instruction.
func (t *translator) scan(expr []byte) (bool, error) {
	f := &t.f
	frames := []frame{}
	tries := 0
	legacy := false
	for pos := 0; ; {
		if pos >= len(expr) {
			return false, fmt.Errorf("%w: function body ends before its end instruction", wasmbin.ErrMalformed)
		}
		ins, err := wasmbin.DecodeInstr(expr[pos:])
		if err != nil {
			return false, fmt.Errorf("offset %d: %w", pos, err)
		}
		next := pos + ins.Len
		switch ins.Op {
		case opBlock, opLoop, opIf, opTryTable:
			frames = append(frames, frame{kind: byte(ins.Op), off: pos})
		case opTry:
			legacy = true
			frames = append(frames, frame{kind: opTry, off: pos, depth: tries})
			tries++
			f.maxDepth = max(f.maxDepth, uint32(tries-1))
			f.tries[pos] = &tryInfo{}
		case opCatch, opCatchAll:
			legacy = true
			if len(frames) == 0 || frames[len(frames)-1].kind != opTry {
				return false, fmt.Errorf("%w: offset %d: catch outside a try", wasmbin.ErrMalformed, pos)
			}
			top := &frames[len(frames)-1]
			top.handler = true
			info := f.tries[top.off]
			tag := int64(-1)
			if ins.Op == opCatch {
				tag = int64(ins.Index)
			}
			info.clauses = append(info.clauses, tag)
		case opRethrow:
			legacy = true
			if uint64(ins.Index) >= uint64(len(frames)) {
				return false, fmt.Errorf("%w: offset %d: rethrow %d names no catch", wasmbin.ErrMalformed, pos, ins.Index)
			}
			g := frames[len(frames)-1-int(ins.Index)]
			if g.kind != opTry || !g.handler {
				return false, fmt.Errorf("%w: offset %d: rethrow %d names no catch", wasmbin.ErrMalformed, pos, ins.Index)
			}
			f.tries[g.off].rethrown = true
			f.rethrows = true
		case opDelegate:
			legacy = true
			if len(frames) == 0 || frames[len(frames)-1].kind != opTry || frames[len(frames)-1].handler {
				return false, fmt.Errorf("%w: offset %d: delegate that ends no try body", wasmbin.ErrMalformed, pos)
			}
			top := frames[len(frames)-1]
			frames = frames[:len(frames)-1]
			tries--
			if uint64(ins.Index) > uint64(len(frames)) {
				return false, fmt.Errorf("%w: offset %d: delegate %d: no such label", wasmbin.ErrMalformed, pos, ins.Index)
			}
			info := f.tries[top.off]
			info.delegate = true
			info.target = funcLevel
			// The nearest try body at or around the label's block.
			for j := len(frames) - 1 - int(ins.Index); j >= 0; j-- {
				if frames[j].kind == opTry && !frames[j].handler {
					info.target = frames[j].off
					f.tries[frames[j].off].targeted = true
					break
				}
			}
			if info.target == funcLevel {
				f.tries[funcLevel] = &tryInfo{targeted: true}
			}
		case opEnd:
			if len(frames) == 0 {
				if next != len(expr) {
					return false, fmt.Errorf("%w: offset %d: end of the function before the end of its body", wasmbin.ErrMalformed, pos)
				}
				return legacy, nil
			}
			if frames[len(frames)-1].kind == opTry {
				tries--
			}
			frames = frames[:len(frames)-1]
		case opElse:
			if len(frames) == 0 || frames[len(frames)-1].kind != opIf {
				return false, fmt.Errorf("%w: offset %d: else outside an if", wasmbin.ErrMalformed, pos)
			}
		}
		pos = next
	}
}

// emit is the second pass: it writes the translated expression to f.out.
// results are the function's result types.
func (t *translator) emit(expr []byte, results [][]byte) error {
	f := &t.f
	f.frames = append(f.frames[:0], frame{kind: 0, off: funcLevel, target: -1})
	if f.spillSize > 0 {
		t.enterSpill(t.blockType(results))
	}
	if info := f.tries[funcLevel]; info != nil && info.targeted {
		t.openTarget(&f.frames[0], t.blockType(results))
	}
	for pos := 0; ; {
		ins, err := wasmbin.DecodeInstr(expr[pos:])
		if err != nil {
			return fmt.Errorf("offset %d: %w", pos, err)
		}
		next := pos + ins.Len
		imm := expr[pos+1 : next]
		switch ins.Op {
		case opBlock, opLoop, opIf:
			f.out = append(f.out, expr[pos:next]...)
			f.frames = append(f.frames, frame{kind: byte(ins.Op), off: pos, target: f.height})
			f.height++
		case opTryTable:
			if err := t.tryTable(expr[pos:next]); err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
			f.frames = append(f.frames, frame{kind: opTryTable, off: pos, target: f.height})
			f.height++
		case opTry:
			if err := t.try(pos, imm); err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
		case opCatch, opCatchAll:
			t.catch()
		case opDelegate:
			t.delegate()
		case opRethrow:
			g := f.frames[len(f.frames)-1-int(ins.Index)]
			f.out = append(f.out, opLocalGet)
			f.out = wasmbin.AppendU32(f.out, f.exnBase+uint32(g.depth))
			f.out = append(f.out, opThrowRef)
		case opEnd:
			top := &f.frames[len(f.frames)-1]
			if top.kind == opTry {
				t.endTry(top)
			} else {
				t.closeTarget(top)
				f.out = append(f.out, opEnd)
				f.height--
			}
			f.frames = f.frames[:len(f.frames)-1]
			if len(f.frames) == 0 {
				if f.spillSize > 0 {
					// The end above closed the block that every branch
					// to the function's label leaves through.
					t.leaveSpill()
					f.out = append(f.out, opEnd)
				}
				return nil
			}
		case opBr, opBrIf, opBrOnNull, opBrOnNonNul:
			f.out = append(f.out, byte(ins.Op))
			f.out = wasmbin.AppendU32(f.out, t.label(ins.Index))
		case opBrTable:
			f.out = append(f.out, opBrTable)
			count, n, _ := wasmbin.U32(imm)
			f.out = wasmbin.AppendU32(f.out, count)
			p := n
			for i := uint64(0); i <= uint64(count); i++ {
				l, n, _ := wasmbin.U32(imm[p:])
				p += n
				f.out = wasmbin.AppendU32(f.out, t.label(l))
			}
		case opReturn, opReturnCall, opReturnCallIndirect, opReturnCallRef:
			if f.spillSize > 0 {
				t.leaveSpill()
			}
			f.out = append(f.out, expr[pos:next]...)
		case opLocalSet, opLocalTee:
			f.out = append(f.out, expr[pos:next]...)
			if sl, ok := f.slots[ins.Index]; ok && f.bodies > 0 {
				t.store(ins.Index, sl)
			}
		default:
			f.out = append(f.out, expr[pos:next]...)
		}
		pos = next
	}
}

// label maps a label of the input, at the current position, to the output.
func (t *translator) label(l uint32) uint32 {
	f := &t.f
	// f.frames[0] is the function, whose label is the last.
	if uint64(l) >= uint64(len(f.frames)) {
		// No such label: keep it out of range, for the runtime to reject.
		return uint32(min(uint64(f.height)+uint64(l)-uint64(len(f.frames)-1), 1<<32-1))
	}
	g := f.frames[len(f.frames)-1-int(l)]
	return uint32(f.height - 1 - g.target)
}

// openTarget opens the two blocks around the body of a delegate target g
// whose results have the block type bt: $x, which the body leaves through
// at its end, and $d, where delegated exceptions arrive.
func (t *translator) openTarget(g *frame, bt []byte) {
	f := &t.f
	f.out = append(f.out, opBlock)
	f.out = append(f.out, bt...)
	g.xPos = f.height
	f.out = append(f.out, opBlock, valExnref)
	g.dPos = f.height + 1
	g.wrapped = true
	f.height += 2
}

// closeTarget closes what openTarget opened, if it did: the body leaves
// $x, and an exception that reached $d is thrown again inside g's body.
func (t *translator) closeTarget(g *frame) {
	f := &t.f
	info := f.tries[g.off]
	if info == nil || !info.targeted || !g.wrapped {
		return
	}
	f.out = append(f.out, opBr)
	f.out = wasmbin.AppendU32(f.out, uint32(f.height-1-g.xPos))
	f.out = append(f.out, opEnd, opThrowRef, opEnd)
	f.height -= 2
	g.wrapped = false
}

// try translates the opening of a legacy try at offset off with the block
// type imm.
func (t *translator) try(off int, imm []byte) error {
	f := &t.f
	info := f.tries[off]
	if err := t.noParams(imm); err != nil {
		return err
	}
	depth := 0
	for _, g := range f.frames {
		if g.kind == opTry {
			depth++
		}
	}
	g := frame{kind: opTry, off: off, depth: depth}
	switch {
	case info.delegate:
		// block bt; block (result exnref); try_table bt (catch_all_ref 0):
		// the exception goes on to the target by a br, not straight from
		// the clause, as wazero v1.12.0's compiler does not leave the
		// try_tables in between when a clause branches past them.
		f.out = append(f.out, opBlock)
		f.out = append(f.out, imm...)
		f.out = append(f.out, opBlock, valExnref)
		f.out = append(f.out, opTryTable)
		f.out = append(f.out, imm...)
		f.out = append(f.out, 1, clauseCatchAllRef, 0)
		g.target = f.height + 2
		f.height += 3
	case len(info.clauses) == 0:
		f.out = append(f.out, opBlock)
		f.out = append(f.out, imm...)
		g.target = f.height
		f.height++
	default:
		// block bt; one block per clause, the last outermost; try_table.
		t.sync(off)
		f.bodies++
		f.out = append(f.out, opBlock)
		f.out = append(f.out, imm...)
		g.target = f.height
		f.height++
		n := len(info.clauses)
		for i := n - 1; i >= 0; i-- {
			var res [][]byte
			if tag := info.clauses[i]; tag >= 0 {
				params, err := t.tagParams(uint32(tag))
				if err != nil {
					return err
				}
				res = append(res, params...)
			}
			if info.rethrown {
				res = append(res, []byte{valExnref})
			}
			f.out = append(f.out, opBlock)
			f.out = append(f.out, t.blockType(res)...)
			f.height++
		}
		f.out = append(f.out, opTryTable)
		f.out = append(f.out, imm...)
		f.out = wasmbin.AppendU32(f.out, uint32(n))
		for i, tag := range info.clauses {
			kind := byte(clauseCatch)
			if tag < 0 {
				kind = clauseCatchAll
			}
			if info.rethrown {
				kind++ // the _ref form
			}
			f.out = append(f.out, kind)
			if tag >= 0 {
				f.out = wasmbin.AppendU32(f.out, uint32(tag))
			}
			f.out = wasmbin.AppendU32(f.out, uint32(i))
		}
		f.height++
	}
	f.frames = append(f.frames, g)
	if info.targeted {
		t.openTarget(&f.frames[len(f.frames)-1], imm)
	}
	return nil
}

// catch translates a catch or catch_all: it closes the body (the first
// clause) or the previous handler, and the block of this clause.
func (t *translator) catch() {
	f := &t.f
	g := &f.frames[len(f.frames)-1]
	info := f.tries[g.off]
	if !g.handler {
		t.closeTarget(g)
		f.out = append(f.out, opEnd) // the try_table
		f.height--
		g.handler = true
		f.bodies--
	}
	f.out = append(f.out, opBr)
	f.out = wasmbin.AppendU32(f.out, uint32(f.height-1-g.target))
	f.out = append(f.out, opEnd) // this clause's block
	f.height--
	if info.rethrown {
		f.out = append(f.out, opLocalSet)
		f.out = wasmbin.AppendU32(f.out, f.exnBase+uint32(g.depth))
	}
	t.reload(g.off)
}

// delegate translates the delegate that ends a try: the try_table ends,
// the body's results leave the outer block, and an exception caught goes
// to the target's block for delegated exceptions.
func (t *translator) delegate() {
	f := &t.f
	g := &f.frames[len(f.frames)-1]
	t.closeTarget(g)
	info := f.tries[g.off]
	dest := funcLevel
	for _, h := range f.frames {
		if h.off == info.target {
			dest = h.dPos
		}
	}
	f.out = append(f.out, opEnd, opBr, 1, opEnd, opBr) // try_table, br to the outer block, the exnref's block
	f.height -= 2
	f.out = wasmbin.AppendU32(f.out, uint32(f.height-1-dest))
	f.out = append(f.out, opEnd)
	f.height--
	f.frames = f.frames[:len(f.frames)-1]
}

// endTry translates the end of a legacy try.
func (t *translator) endTry(g *frame) {
	f := &t.f
	if !g.handler { // a try without clauses, now a block
		t.closeTarget(g)
	}
	f.out = append(f.out, opEnd)
	f.height--
}

// tryTable copies a try_table of the input with its clauses' labels
// mapped. Its labels are relative to the block around it.
func (t *translator) tryTable(in []byte) error {
	f := &t.f
	bt, catches, err := wasmbin.TryTable(in)
	if err != nil {
		return err
	}
	f.out = append(f.out, opTryTable)
	f.out = append(f.out, bt...)
	f.out = wasmbin.AppendU32(f.out, uint32(len(catches)))
	for _, c := range catches {
		f.out = append(f.out, c.Kind)
		if c.Kind == clauseCatch || c.Kind == clauseCatchRef {
			f.out = wasmbin.AppendU32(f.out, c.Tag)
		}
		f.out = wasmbin.AppendU32(f.out, t.label(c.Label))
	}
	return nil
}
