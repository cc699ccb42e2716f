package wasmbin

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLEB128RoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, math.MaxUint32, math.MaxUint64} {
		b := AppendU64(nil, v)
		got, n, err := U64(b)
		require.NoError(t, err)
		assert.Equal(t, v, got)
		assert.Equal(t, len(b), n)
	}
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64} {
		b := AppendS64(nil, v)
		got, n, err := S64(b)
		require.NoError(t, err)
		assert.Equal(t, v, got)
		assert.Equal(t, len(b), n)
	}
}

func TestLEB128Rejects(t *testing.T) {
	cases := map[string]struct {
		in  []byte
		dec func([]byte) error
	}{
		"truncated":        {[]byte{0x80}, func(b []byte) error { _, _, err := U32(b); return err }},
		"u32 too long":     {[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, func(b []byte) error { _, _, err := U32(b); return err }},
		"u32 high bits":    {[]byte{0xff, 0xff, 0xff, 0xff, 0x1f}, func(b []byte) error { _, _, err := U32(b); return err }},
		"s32 bad sign ext": {[]byte{0xff, 0xff, 0xff, 0xff, 0x4f}, func(b []byte) error { _, _, err := S32(b); return err }},
		"s32 mixed top":    {[]byte{0x80, 0x80, 0x80, 0x80, 0x08}, func(b []byte) error { _, _, err := S32(b); return err }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, c.dec(c.in), ErrLEB128)
		})
	}
	v, _, err := S32([]byte{0x80, 0x80, 0x80, 0x80, 0x78})
	require.NoError(t, err)
	assert.Equal(t, int32(math.MinInt32), v)
	u, _, err := U32([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	require.NoError(t, err)
	assert.Equal(t, uint32(math.MaxUint32), u)
}

// tiny is a module with a type section, a custom "name" section and a
// custom ".debug_info" section.
func tiny() []byte {
	m := &Module{Sections: []Section{
		{ID: SectionType, Payload: []byte{0x01, 0x60, 0x00, 0x00}},
		{ID: SectionCustom, Name: ".debug_info", Payload: []byte{1, 2, 3}},
		{ID: SectionCustom, Name: "name", Payload: []byte{9}},
	}}
	return m.Encode()
}

func TestParseEncodeRoundTrip(t *testing.T) {
	b := tiny()
	m, err := Parse(b)
	require.NoError(t, err)
	require.Len(t, m.Sections, 3)
	assert.Equal(t, ".debug_info", m.Sections[1].Name)
	assert.Equal(t, []byte{1, 2, 3}, m.Sections[1].Payload)
	assert.Equal(t, b, m.Encode())
}

func TestRemoveCustom(t *testing.T) {
	m, err := Parse(tiny())
	require.NoError(t, err)
	n := m.RemoveCustom(func(name string) bool { return name == ".debug_info" })
	assert.Equal(t, 1, n)
	again, err := Parse(m.Encode())
	require.NoError(t, err)
	require.Len(t, again.Sections, 2)
	assert.Equal(t, "name", again.Sections[1].Name)
	assert.NotNil(t, again.Section(SectionType))
	assert.Nil(t, again.Section(SectionCode))
}

func TestParseRejects(t *testing.T) {
	good := tiny()
	cases := map[string][]byte{
		"empty":            nil,
		"not wasm":         []byte("#!/bin/sh\necho hi\n"),
		"version 2":        {0, 'a', 's', 'm', 2, 0, 0, 0},
		"size past end":    append(append([]byte{}, header...), 1, 10, 0),
		"bad size":         append(append([]byte{}, header...), 1, 0x80),
		"unknown id":       append(append([]byte{}, header...), 14, 0),
		"tag after global": append(append([]byte{}, header...), 6, 1, 0, 13, 1, 0),
		"out of order":     append(append([]byte{}, header...), 3, 0, 1, 0),
		"duplicate":        append(append([]byte{}, header...), 1, 0, 1, 0),
		"bad custom name":  append(append([]byte{}, header...), 0, 2, 5, 'a'),
		"truncated":        good[:len(good)-2],
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(b)
			assert.Error(t, err)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(tiny())
	f.Add(append(append([]byte{}, header...), 0, 1, 0))
	f.Add(append(append([]byte{}, header...), 5, 3, 1, 0, 1, 13, 3, 1, 0, 0, 6, 1, 0)) // memory, tag, global
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		// What parses must encode back to something that parses the same.
		again, err := Parse(m.Encode())
		require.NoError(t, err)
		require.Equal(t, len(m.Sections), len(again.Sections))
	})
}

func TestTagSection(t *testing.T) {
	// type, memory, tag, global: the tag section sits between memory and
	// global.
	m := &Module{Sections: []Section{
		{ID: SectionType, Payload: []byte{1, 0x60, 1, 0x7F, 0}},
		{ID: SectionMemory, Payload: []byte{1, 0, 1}},
		{ID: SectionTag, Payload: []byte{2, 0, 0, 0, 0}},
		{ID: SectionGlobal, Payload: []byte{0}},
	}}
	b := m.Encode()
	again, err := Parse(b)
	require.NoError(t, err)
	require.Len(t, again.Sections, 4)
	tags, err := Tags(again.Section(SectionTag).Payload)
	require.NoError(t, err)
	assert.Equal(t, []uint32{0, 0}, tags)

	// Insert places sections around it in order.
	m.Sections = append(m.Sections[:2:2], m.Sections[3])
	m.Insert(Section{ID: SectionTag, Payload: []byte{0}})
	m.Insert(Section{ID: SectionExport, Payload: []byte{0}})
	var ids []byte
	for _, s := range m.Sections {
		ids = append(ids, s.ID)
	}
	assert.Equal(t, []byte{SectionType, SectionMemory, SectionTag, SectionGlobal, SectionExport}, ids)
	_, err = Parse(m.Encode())
	require.NoError(t, err)

	for name, payload := range map[string][]byte{
		"attribute 1":   {1, 1, 0},
		"truncated":     {2, 0, 0},
		"trailing byte": {1, 0, 0, 0},
	} {
		_, err := Tags(payload)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
}
