package wasmbin

// Insert adds a non-custom section where the binary format requires it:
// before the first non-custom section that must follow it, so after any
// custom sections that precede that one. It does not check that the module
// lacks a section with the same id.
func (m *Module) Insert(s Section) {
	at := len(m.Sections)
	for i, t := range m.Sections {
		if t.ID != SectionCustom && order(t.ID) > order(s.ID) {
			at = i
			break
		}
	}
	m.Sections = append(m.Sections, Section{})
	copy(m.Sections[at+1:], m.Sections[at:])
	m.Sections[at] = s
}
