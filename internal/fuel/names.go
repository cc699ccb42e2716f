package fuel

import "github.com/fumehood/fumehood/internal/wasmbin"

// Subsections of the "name" custom section that are keyed by function index.
const (
	namesFunctions = 1 // name map
	namesLocals    = 2 // indirect name map
	namesLabels    = 3 // indirect name map (extended name section)
)

// names returns the payload of a "name" section with its function indices
// shifted, or false if the section is malformed.
func (in *instrumenter) names(payload []byte) ([]byte, bool) {
	out := make([]byte, 0, len(payload)+64)
	var sub []byte
	r := reader{b: payload}
	for !r.done() {
		id := r.byte()
		content := r.bytes(r.u32())
		if r.err != nil {
			return nil, false
		}
		s := reader{b: content}
		sub = sub[:0]
		switch id {
		case namesFunctions:
			sub = in.nameMap(sub, &s, true)
		case namesLocals, namesLabels:
			n := s.count(2)
			sub = wasmbin.AppendU32(sub, n)
			for i := uint32(0); i < n && s.err == nil; i++ {
				sub = in.funcIdx(sub, &s)
				sub = in.nameMap(sub, &s, false)
			}
		default:
			sub = append(sub, content...)
			s.pos = len(content)
		}
		if s.err != nil || s.pos != len(content) {
			return nil, false
		}
		out = append(out, id)
		out = wasmbin.AppendU32(out, uint32(len(sub)))
		out = append(out, sub...)
	}
	return out, r.err == nil
}

// nameMap copies a name map, shifting its indices if they are function
// indices.
func (in *instrumenter) nameMap(out []byte, r *reader, funcs bool) []byte {
	n := r.count(2)
	out = wasmbin.AppendU32(out, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		if funcs {
			out = in.funcIdx(out, r)
		} else {
			out = wasmbin.AppendU32(out, r.u32())
		}
		start := r.pos
		r.name()
		out = append(out, r.b[start:r.pos]...)
	}
	return out
}

func (in *instrumenter) funcIdx(out []byte, r *reader) []byte {
	idx, err := in.funcIndex(r.u32())
	if err != nil {
		r.fail("%v", err)
	}
	return wasmbin.AppendU32(out, idx)
}
