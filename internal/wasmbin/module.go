// Package wasmbin reads and writes the section structure of WebAssembly
// binaries, and decodes the LEB128 integers they are built from.
//
// It does not validate a module's semantics: that is the runtime's job. It
// checks only what it needs to split a binary into sections and join them
// again byte for byte, so that passes such as stripping debug sections,
// rewriting exports or instrumenting code can work on untrusted input
// without panicking.
package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Section IDs defined by the WebAssembly core specification.
const (
	SectionCustom    byte = 0
	SectionType      byte = 1
	SectionImport    byte = 2
	SectionFunction  byte = 3
	SectionTable     byte = 4
	SectionMemory    byte = 5
	SectionGlobal    byte = 6
	SectionExport    byte = 7
	SectionStart     byte = 8
	SectionElement   byte = 9
	SectionCode      byte = 10
	SectionData      byte = 11
	SectionDataCount byte = 12
	// SectionTag holds the tags of the exception-handling proposal; it
	// sits between the memory and global sections.
	SectionTag byte = 13
)

// ErrNotWasm reports input that is not a WebAssembly binary module.
var ErrNotWasm = errors.New("wasmbin: not a WebAssembly binary module")

// ErrMalformed reports a binary module whose section structure is broken.
var ErrMalformed = errors.New("wasmbin: malformed module")

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Section is one section of a module.
type Section struct {
	// ID is the section's kind, one of the Section* constants.
	ID byte
	// Name is the name of a custom section, empty for the others.
	Name string
	// Payload is the section's content. For a custom section it is the
	// content after the name.
	Payload []byte
}

// Module is a binary module split into its sections, in order.
type Module struct {
	Sections []Section
}

// IsWasm reports whether b starts with the header of a version 1 binary module.
func IsWasm(b []byte) bool { return bytes.HasPrefix(b, header) }

// Parse splits b into sections. The sections' payloads alias b.
func Parse(b []byte) (*Module, error) {
	if !IsWasm(b) {
		return nil, ErrNotWasm
	}
	m := &Module{}
	rest := b[len(header):]
	off := len(header)
	var last byte
	for len(rest) > 0 {
		id := rest[0]
		size, n, err := U32(rest[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: section at offset %d: size: %v", ErrMalformed, off, err)
		}
		start := 1 + n
		if uint64(size) > uint64(len(rest)-start) {
			return nil, fmt.Errorf("%w: section %d at offset %d: size %d runs past the end", ErrMalformed, id, off, size)
		}
		if id > SectionTag {
			return nil, fmt.Errorf("%w: unknown section id %d at offset %d", ErrMalformed, id, off)
		}
		payload := rest[start : start+int(size)]
		s := Section{ID: id, Payload: payload}
		if id == SectionCustom {
			nameLen, k, err := U32(payload)
			if err != nil || uint64(nameLen) > uint64(len(payload)-k) {
				return nil, fmt.Errorf("%w: custom section at offset %d: bad name", ErrMalformed, off)
			}
			name := payload[k : k+int(nameLen)]
			if !utf8.Valid(name) {
				return nil, fmt.Errorf("%w: custom section at offset %d: name is not UTF-8", ErrMalformed, off)
			}
			s.Name = string(name)
			s.Payload = payload[k+int(nameLen):]
		} else {
			if order(id) <= order(last) && last != 0 {
				return nil, fmt.Errorf("%w: section %d at offset %d is out of order", ErrMalformed, id, off)
			}
			last = id
		}
		m.Sections = append(m.Sections, s)
		rest = rest[start+int(size):]
		off += start + int(size)
	}
	return m, nil
}

// sectionOrder gives the position each non-custom section must keep: the
// tag section sits between memory and global, the data count section
// between element and code.
var sectionOrder = [...]int{
	SectionType: 1, SectionImport: 2, SectionFunction: 3, SectionTable: 4,
	SectionMemory: 5, SectionTag: 6, SectionGlobal: 7, SectionExport: 8,
	SectionStart: 9, SectionElement: 10, SectionDataCount: 11, SectionCode: 12,
	SectionData: 13,
}

// order gives the position a non-custom section must keep.
func order(id byte) int { return sectionOrder[id] }

// Encode joins the sections into a binary module.
func (m *Module) Encode() []byte {
	size := len(header)
	for _, s := range m.Sections {
		size += 1 + 5 + len(s.Payload) + 5 + len(s.Name)
	}
	out := make([]byte, 0, size)
	out = append(out, header...)
	for _, s := range m.Sections {
		out = append(out, s.ID)
		if s.ID == SectionCustom {
			var name []byte
			name = AppendU32(name, uint32(len(s.Name)))
			name = append(name, s.Name...)
			out = AppendU32(out, uint32(len(name)+len(s.Payload)))
			out = append(out, name...)
		} else {
			out = AppendU32(out, uint32(len(s.Payload)))
		}
		out = append(out, s.Payload...)
	}
	return out
}

// Section returns the first section with the given non-custom id, or nil.
func (m *Module) Section(id byte) *Section {
	for i := range m.Sections {
		if m.Sections[i].ID == id && id != SectionCustom {
			return &m.Sections[i]
		}
	}
	return nil
}

// RemoveCustom removes every custom section whose name satisfies drop and
// returns how many it removed.
func (m *Module) RemoveCustom(drop func(name string) bool) int {
	kept := m.Sections[:0]
	removed := 0
	for _, s := range m.Sections {
		if s.ID == SectionCustom && drop(s.Name) {
			removed++
			continue
		}
		kept = append(kept, s)
	}
	m.Sections = kept
	return removed
}
