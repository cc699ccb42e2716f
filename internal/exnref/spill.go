package exnref

import (
	"fmt"
	"sort"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// wazero v1.12.0's compiler gives a try_table's catch handlers the values
// the function's locals had when the try_table was entered, not when the
// exception was thrown (wazero issue 2503, fixed after that release). Code
// from clang reads, in its landing pads, locals that the protected code
// changed. So the translation keeps, for each activation of a function
// whose handlers need it, a spill area in the C stack (LLVM's stack
// pointer, which grows down): on entry the function takes the area below
// the stack pointer, and gives it back before it returns;
// every local that the body of a try with catch clauses writes is stored
// into the area at the try's entry and after each write inside the body,
// and each of that try's handlers loads it back first. An exception that
// leaves the function does not give the area back: the function that
// catches it restores the stack pointer it saved, as every function with a
// landing pad from LLVM does. Locals of reference types are not spilled
// (the translation's own exnref locals are written only in handlers).

// Opcodes the work-around writes or looks for.
const (
	opReturn             = 0x0F
	opReturnCall         = 0x12
	opReturnCallIndirect = 0x13
	opReturnCallRef      = 0x15
	opLocalTee           = 0x22
	opGlobalGet          = 0x23
	opGlobalSet          = 0x24
	opI32Const           = 0x41
	opI32Add             = 0x6A
	opI32Sub             = 0x6B
	valI32               = 0x7F
)

// localGroup is a run of locals of one type, ending before local index end.
type localGroup struct {
	end uint64
	typ byte
}

// slot is a spilled local's place in the spill area and how it is moved.
type slot struct {
	off         uint32
	load, store []byte // opcode (with prefix) and alignment
}

// slotKinds are the spillable value types: size, load, store.
var slotKinds = map[byte]struct {
	size        uint32
	load, store []byte
}{
	0x7F: {4, []byte{0x28, 2}, []byte{0x36, 2}},              // i32
	0x7E: {8, []byte{0x29, 3}, []byte{0x37, 3}},              // i64
	0x7D: {4, []byte{0x2A, 2}, []byte{0x38, 2}},              // f32
	0x7C: {8, []byte{0x2B, 3}, []byte{0x39, 3}},              // f64
	0x7B: {16, []byte{0xFD, 0x00, 4}, []byte{0xFD, 0x0B, 4}}, // v128
}

// localType returns the type of local x (its first byte), 0 if none.
func (f *fn) localType(x uint32) byte {
	i := sort.Search(len(f.localTypes), func(i int) bool { return f.localTypes[i].end > uint64(x) })
	if i == len(f.localTypes) {
		return 0
	}
	return f.localTypes[i].typ
}

// planSpill finds the locals that the body of each try with catch clauses
// writes, and lays out the spill area.
func (t *translator) planSpill(expr []byte) error {
	f := &t.f
	f.written = map[int][]uint32{}
	var open []int // the catch tries whose body is open
	var frames []int
	seen := map[int]map[uint32]bool{}
	all := map[uint32]byte{}
	for pos := 0; pos < len(expr); {
		ins, err := wasmbin.DecodeInstr(expr[pos:])
		if err != nil {
			return fmt.Errorf("offset %d: %w", pos, err)
		}
		switch ins.Op {
		case opBlock, opLoop, opIf, opTryTable:
			frames = append(frames, -1)
		case opTry:
			frames = append(frames, pos)
			if info := f.tries[pos]; !info.delegate && len(info.clauses) > 0 {
				open = append(open, pos)
				seen[pos] = map[uint32]bool{}
			}
		case opCatch, opCatchAll:
			if top := frames[len(frames)-1]; len(open) > 0 && open[len(open)-1] == top {
				open = open[:len(open)-1]
			}
		case opEnd, opDelegate:
			if len(frames) > 0 {
				frames = frames[:len(frames)-1]
			}
		case opLocalSet, opLocalTee:
			typ := f.localType(ins.Index)
			if _, ok := slotKinds[typ]; !ok || len(open) == 0 {
				break
			}
			all[ins.Index] = typ
			for _, tr := range open {
				if !seen[tr][ins.Index] {
					seen[tr][ins.Index] = true
					f.written[tr] = append(f.written[tr], ins.Index)
				}
			}
		}
		pos += ins.Len
	}
	if len(all) == 0 {
		return nil
	}
	if !t.spOK {
		return fmt.Errorf("%w: no C stack pointer (LLVM's convention) for the handlers' locals", ErrUnsupported)
	}
	f.sp = t.sp
	locals := make([]uint32, 0, len(all))
	for x := range all {
		locals = append(locals, x)
	}
	sort.Slice(locals, func(i, j int) bool { return locals[i] < locals[j] })
	f.slots = make(map[uint32]slot, len(locals))
	// Larger slots first keeps every slot aligned.
	for _, size := range []uint32{16, 8, 4} {
		for _, x := range locals {
			k := slotKinds[all[x]]
			if k.size == size {
				f.slots[x] = slot{off: f.spillSize, load: k.load, store: k.store}
				f.spillSize += size
			}
		}
	}
	f.spillSize = (f.spillSize + 15) &^ 15
	return nil
}

// enterSpill takes the spill area on function entry and opens the block
// that every branch to the function's label leaves through; bt is the
// block type of the function's results.
func (t *translator) enterSpill(bt []byte) {
	f := &t.f
	f.out = append(f.out, opGlobalGet)
	f.out = wasmbin.AppendU32(f.out, f.sp)
	f.out = append(f.out, opI32Const)
	f.out = wasmbin.AppendS64(f.out, int64(f.spillSize))
	f.out = append(f.out, opI32Sub, opLocalTee)
	f.out = wasmbin.AppendU32(f.out, f.base)
	f.out = append(f.out, opGlobalSet)
	f.out = wasmbin.AppendU32(f.out, f.sp)
	f.out = append(f.out, opBlock)
	f.out = append(f.out, bt...)
	f.frames[0].target = f.height
	f.height++
}

// leaveSpill gives the spill area back.
func (t *translator) leaveSpill() {
	f := &t.f
	f.out = append(f.out, opLocalGet)
	f.out = wasmbin.AppendU32(f.out, f.base)
	f.out = append(f.out, opI32Const)
	f.out = wasmbin.AppendS64(f.out, int64(f.spillSize))
	f.out = append(f.out, opI32Add, opGlobalSet)
	f.out = wasmbin.AppendU32(f.out, f.sp)
}

// store stores local x into its slot.
func (t *translator) store(x uint32, sl slot) {
	f := &t.f
	f.out = append(f.out, opLocalGet)
	f.out = wasmbin.AppendU32(f.out, f.base)
	f.out = append(f.out, opLocalGet)
	f.out = wasmbin.AppendU32(f.out, x)
	f.out = append(f.out, sl.store...)
	f.out = wasmbin.AppendU32(f.out, sl.off)
}

// sync stores, on entry to the try at off, the locals its body writes.
func (t *translator) sync(off int) {
	f := &t.f
	for _, x := range f.written[off] {
		t.store(x, f.slots[x])
	}
}

// reload loads, at the start of a handler of the try at off, the locals
// its body writes.
func (t *translator) reload(off int) {
	f := &t.f
	for _, x := range f.written[off] {
		sl := f.slots[x]
		f.out = append(f.out, opLocalGet)
		f.out = wasmbin.AppendU32(f.out, f.base)
		f.out = append(f.out, sl.load...)
		f.out = wasmbin.AppendU32(f.out, sl.off)
		f.out = append(f.out, opLocalSet)
		f.out = wasmbin.AppendU32(f.out, x)
	}
}
