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
	r := reader{B: payload}
	for !r.Done() {
		id := r.Byte()
		content := r.Bytes(r.U32())
		if r.Err != nil {
			return nil, false
		}
		s := reader{B: content}
		sub = sub[:0]
		switch id {
		case namesFunctions:
			sub = in.nameMap(sub, &s, true)
		case namesLocals, namesLabels:
			n := s.Count(2)
			sub = wasmbin.AppendU32(sub, n)
			for i := uint32(0); i < n && s.Err == nil; i++ {
				sub = in.funcIdx(sub, &s)
				sub = in.nameMap(sub, &s, false)
			}
		default:
			sub = append(sub, content...)
			s.Pos = len(content)
		}
		if s.Err != nil || s.Pos != len(content) {
			return nil, false
		}
		out = append(out, id)
		out = wasmbin.AppendU32(out, uint32(len(sub)))
		out = append(out, sub...)
	}
	return out, r.Err == nil
}

// nameMap copies a name map, shifting its indices if they are function
// indices.
func (in *instrumenter) nameMap(out []byte, r *reader, funcs bool) []byte {
	n := r.Count(2)
	out = wasmbin.AppendU32(out, n)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		if funcs {
			out = in.funcIdx(out, r)
		} else {
			out = wasmbin.AppendU32(out, r.U32())
		}
		start := r.Pos
		r.Name()
		out = append(out, r.B[start:r.Pos]...)
	}
	return out
}

func (in *instrumenter) funcIdx(out []byte, r *reader) []byte {
	idx, err := in.funcIndex(r.U32())
	if err != nil {
		r.Fail("%v", err)
	}
	return wasmbin.AppendU32(out, idx)
}
