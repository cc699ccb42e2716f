package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testLimits = Limits{MaxSize: 64 << 20, MaxMemory: 16 << 20, MaxFileBytes: 1 << 20, MaxFiles: 100}

func sample() *Snapshot {
	page := bytes.Repeat([]byte{7}, PageSize)
	return &Snapshot{
		Header: Header{
			Guest: "g", Base: "b", MemorySize: 4 << 16, AsyncifyBuffer: 3 << 16,
			Globals: []Global{{Name: "sp", Value: 99}},
			Args:    []string{"python"}, Env: map[string]string{"A": "1"},
			Mounts: []Mount{{Path: "/", InMemory: true}, {Path: "/data", ReadOnly: true}},
			Runs:   2, FuelUsed: 1000,
			Descriptors: []Descriptor{
				{FD: 5, Mount: 0, Path: "work/a.txt", Read: true, Write: true, Offset: 3},
				{FD: 9, Mount: 1, Path: ".", Dir: true, Read: true},
			},
		},
		Pages: []Page{{Index: 1, Data: page}, {Index: 40, Data: page}},
		Files: []File{
			{Path: "work", Kind: KindDir, Mode: 0o755, ModTime: 5},
			{Path: "work/a.txt", Kind: KindFile, Mode: 0o644, ModTime: 6, Data: []byte("hello")},
		},
	}
}

func encode(t testing.TB, s *Snapshot) []byte {
	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, s))
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	out, err := Decode(bytes.NewReader(encode(t, in)), testLimits)
	require.NoError(t, err)
	assert.Equal(t, in, out)
}

func TestDecodeRejects(t *testing.T) {
	good := encode(t, sample())
	for name, tc := range map[string]struct {
		snap *Snapshot
		lim  Limits
	}{
		"memory over the limit": {sample(), Limits{MaxSize: 1 << 20, MaxMemory: 1 << 16, MaxFileBytes: 1 << 20, MaxFiles: 10}},
		"too many files":        {sample(), Limits{MaxSize: 1 << 20, MaxMemory: 1 << 20, MaxFileBytes: 1 << 20, MaxFiles: 1}},
		"files too large":       {sample(), Limits{MaxSize: 1 << 20, MaxMemory: 1 << 20, MaxFileBytes: 3, MaxFiles: 10}},
		"too large":             {sample(), Limits{MaxSize: 100, MaxMemory: 1 << 20, MaxFileBytes: 1 << 20, MaxFiles: 10}},
	} {
		_, err := Decode(bytes.NewReader(encode(t, tc.snap)), tc.lim)
		assert.ErrorIs(t, err, ErrLimit, name)
	}
	for name, edit := range map[string]func(*Snapshot){
		"page outside memory": func(s *Snapshot) { s.Pages[1].Index = 4 << 4 },
		"pages out of order":  func(s *Snapshot) { s.Pages[0].Index = 50 },
		"file before its dir": func(s *Snapshot) { s.Files[0], s.Files[1] = s.Files[1], s.Files[0] },
		"file in a volume":    func(s *Snapshot) { s.Files[0].Mount = 1 },
		"escaping path":       func(s *Snapshot) { s.Files[0].Path = "../x" },
		"absolute path":       func(s *Snapshot) { s.Files[0].Path = "/x" },
		"duplicate":           func(s *Snapshot) { s.Files[1].Path = "work" },
		"file under a file":   func(s *Snapshot) { s.Files = append(s.Files, File{Path: "work/a.txt/b", Kind: KindFile}) },
		"buffer outside":      func(s *Snapshot) { s.Header.AsyncifyBuffer = 1 << 30 },
		"no guest":            func(s *Snapshot) { s.Header.Guest = "" },
		"odd memory size":     func(s *Snapshot) { s.Header.MemorySize = 65537 * 2 },
		"bad kind":            func(s *Snapshot) { s.Files[1].Kind = 9 },
	} {
		s := sample()
		edit(s)
		_, err := Decode(bytes.NewReader(encode(t, s)), testLimits)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
	_, err := Decode(bytes.NewReader([]byte("not a snapshot, clearly")), testLimits)
	assert.ErrorIs(t, err, ErrFormat)
	for n := 0; n < len(good); n += 1 + n/3 {
		_, err := Decode(bytes.NewReader(good[:n]), testLimits)
		assert.ErrorIs(t, err, ErrCorrupt, "truncated to %d", n)
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 1
		_, err := Decode(bytes.NewReader(bad), testLimits)
		require.Error(t, err, "bit flipped at %d", i)
		assert.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrFormat) || errors.Is(err, ErrVersion) || errors.Is(err, ErrLimit), "byte %d: %v", i, err)
	}
}

// craft encodes a snapshot around the given JSON header, with an empty
// body and a valid checksum, as an attacker can.
func craft(header string) []byte { return craftVersion(Version, header) }

// craftVersion is craft for a given format version.
func craftVersion(version uint32, header string) []byte {
	var b bytes.Buffer
	b.WriteString("FUMEHOODSNAP")
	b.Write(binary.LittleEndian.AppendUint32(nil, version))
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(header))))
	b.WriteString(header)
	b.Write(binary.LittleEndian.AppendUint64(nil, 0))
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// listHeader is a header whose field holds n copies of item, in a list
// (or in an object, if item is a member).
func listHeader(field, item string, n int) string {
	open, end := "[", "]"
	if strings.Contains(item, ":") && !strings.HasPrefix(item, "{") {
		open, end = "{", "}"
	}
	return `{"guest":"g","base":"b","memory_size":65536,"asyncify_buffer":8,"mounts":[{"path":"/","in_memory":true}],"` +
		field + `":` + open + strings.Repeat(item+",", n-1) + item + end + "}"
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A crafted header of millions of empty values (a few bytes each, but 16
// or more bytes each once decoded) is refused before it is parsed: Decode
// allocates a small fixed amount, whatever the size limit.
func TestDecodeBoundsHeader(t *testing.T) {
	huge := Limits{MaxSize: 1 << 40, MaxMemory: 1 << 32, MaxFileBytes: 1 << 40, MaxFiles: 1 << 24}
	var env []string
	for i := range MaxEnv + 1 {
		env = append(env, fmt.Sprintf(`"K%d":""`, i))
	}
	for name, tc := range map[string]struct {
		header string
		max    uint64 // bytes Decode may allocate
		msg    string
	}{
		"10 million args":              {listHeader("args", `""`, 10_000_000), 1 << 20, "header of"},
		"args just under MaxHeader":    {listHeader("args", `""`, MaxHeader/3-200), 4 << 20, "values"},
		"env just under MaxHeader":     {listHeader("env", `"":""`, MaxHeader/6-100), 4 << 20, "values"},
		"globals just under MaxHeader": {listHeader("globals", `{}`, MaxHeader/3-200), 4 << 20, "values"},
		"mounts just under MaxHeader":  {listHeader("mounts", `{}`, MaxHeader/3-200), 4 << 20, "values"},
		"too many args":                {listHeader("args", `""`, MaxArgs+1), 1 << 20, "arguments"},
		"too many env":                 {listHeader("env", strings.Join(env, ","), 1), 4 << 20, "environment variables"},
		"too many globals":             {listHeader("globals", `{"name":"n"}`, MaxGlobals+1), 1 << 20, "globals"},
		"too many mounts":              {listHeader("mounts", `{"path":"/"}`, MaxMounts+1), 1 << 20, "mounts"},
	} {
		data := craft(tc.header)
		var err error
		n := allocated(func() { _, err = Decode(bytes.NewReader(data), huge) })
		require.ErrorIs(t, err, ErrCorrupt, name)
		assert.ErrorContains(t, err, tc.msg, name)
		t.Logf("%s: %d bytes allocated for a %d-byte snapshot", name, n, len(data))
		assert.Less(t, n, tc.max, "%s: %d bytes allocated for a %d-byte snapshot (%v)", name, n, len(data), err)
	}

	// What Decode refuses, Encode does not write.
	s := sample()
	s.Header.Args = make([]string, MaxArgs+1)
	assert.ErrorIs(t, Encode(&bytes.Buffer{}, s), ErrLimit)
	s = sample()
	s.Header.Env = map[string]string{"BIG": strings.Repeat("x", MaxHeader)}
	assert.ErrorIs(t, Encode(&bytes.Buffer{}, s), ErrLimit)
}

// A body length past the size limit is refused without reading it into
// memory; a stream longer than the limit is refused after MaxSize bytes.
func TestDecodeBoundsReading(t *testing.T) {
	good := encode(t, sample())
	lim := testLimits
	lim.MaxSize = int64(len(good))
	_, err := Decode(bytes.NewReader(good), lim)
	require.NoError(t, err, "exactly MaxSize bytes")
	lim.MaxSize--
	_, err = Decode(bytes.NewReader(good), lim)
	require.ErrorIs(t, err, ErrLimit)

	// A huge body length in a short snapshot: corrupt, and nothing
	// allocated for it.
	bad := craft(`{}`)
	binary.LittleEndian.PutUint64(bad[prefixLen+2:], 1<<50)
	n := allocated(func() { _, err = Decode(bytes.NewReader(bad), Limits{MaxSize: 1 << 40, MaxMemory: 1 << 20}) })
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Less(t, n, uint64(1<<20))
	// An endless stream is read up to MaxSize and no further.
	endless := io.MultiReader(bytes.NewReader(bad[:prefixLen+2+8]), zeros{})
	n = allocated(func() { _, err = Decode(endless, Limits{MaxSize: 64 << 20, MaxMemory: 1 << 20}) })
	require.ErrorIs(t, err, ErrLimit)
	assert.Less(t, n, uint64(1<<20))
	// A body within MaxSize is buffered as it arrives, not at its
	// declared length.
	binary.LittleEndian.PutUint64(bad[prefixLen+2:], 60<<20)
	n = allocated(func() { _, err = Decode(bytes.NewReader(bad), Limits{MaxSize: 64 << 20, MaxMemory: 1 << 20}) })
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Less(t, n, uint64(4<<20))
}

// zeros is an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func FuzzDecode(f *testing.F) {
	for _, s := range []*Snapshot{sample(), {Header: sample().Header}} {
		e := encode(f, s)
		f.Add(e[:len(e)-sha256.Size]) // the checksum is added back
	}
	// Descriptors: a version 1 snapshot, too many, a huge number, a long
	// path.
	v1 := craftVersion(1, descriptorHeader(`{"fd":3,"mount":0,"path":"a","read":true}`))
	f.Add(v1[:len(v1)-sha256.Size])
	for _, h := range []string{
		descriptorHeader(strings.Repeat(`{"fd":3,"mount":0,"path":"a","read":true},`, MaxDescriptors) + `{"fd":4,"mount":0,"path":"a","read":true}`),
		descriptorHeader(`{"fd":2147483647,"mount":0,"path":"a","read":true}`),
		descriptorHeader(`{"fd":3,"mount":0,"path":"` + strings.Repeat("a", MaxPath+1) + `","read":true}`),
	} {
		e := craft(h)
		f.Add(e[:len(e)-sha256.Size])
	}
	// Crafted headers: too many values, too many arguments, too long.
	for _, h := range []string{listHeader("args", `""`, MaxArgs+1), listHeader("env", `"":""`, 3), listHeader("globals", `{}`, MaxHeaderValues+1)} {
		e := craft(h)
		f.Add(e[:len(e)-sha256.Size])
	}
	long := craft(`{}`)
	binary.LittleEndian.PutUint32(long[16:], MaxHeader+1)
	f.Add(long[:len(long)-sha256.Size])
	f.Add([]byte("FUMEHOODSNAP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeOne(t, data)
		// The checksum stops nearly every random input at once: fuzz the
		// rest of the decoder with a valid checksum too.
		sum := sha256.Sum256(data)
		decodeOne(t, append(bytes.Clone(data), sum[:]...))
	})
}

func decodeOne(t *testing.T, data []byte) {
	{
		s, err := Decode(bytes.NewReader(data), testLimits)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrLimit) {
				t.Fatalf("error of no kind: %v", err)
			}
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		again, err := Decode(bytes.NewReader(encode(t, s)), testLimits)
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if len(again.Pages) != len(s.Pages) || len(again.Files) != len(s.Files) || len(again.Header.Descriptors) != len(s.Header.Descriptors) {
			t.Fatal("re-encoded snapshot differs")
		}
	}
}

// descriptorHeader is a valid header but for its descriptors, the given
// JSON list items.
func descriptorHeader(items string) string {
	return `{"guest":"g","base":"b","memory_size":65536,"asyncify_buffer":8,"mounts":[{"path":"/","in_memory":true}],"args":[],"globals":[],"runs":0,"fuel_used":0,"descriptors":[` + items + `]}`
}

// emptyBody is the body of a snapshot with no pages and no files.
func emptyBody(t *testing.T) []byte {
	var body bytes.Buffer
	enc, err := zstd.NewWriter(&body)
	require.NoError(t, err)
	_, err = enc.Write(make([]byte, 8))
	require.NoError(t, err)
	require.NoError(t, enc.Close())
	return body.Bytes()
}

// craftWithBody is craftVersion with a body.
func craftWithBody(version uint32, header string, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString("FUMEHOODSNAP")
	b.Write(binary.LittleEndian.AppendUint32(nil, version))
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(header))))
	b.WriteString(header)
	b.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(body))))
	b.Write(body)
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

func TestDecodeDescriptors(t *testing.T) {
	body := emptyBody(t)
	ok := `{"fd":3,"mount":0,"path":"tmp/a.db","read":true,"write":true,"offset":7},{"fd":7,"mount":0,"path":".","dir":true,"read":true},` +
		`{"fd":9,"mount":-1,"path":"share/font.ttf","read":true,"offset":12}`
	s, err := Decode(bytes.NewReader(craftWithBody(Version, descriptorHeader(ok), body)), testLimits)
	require.NoError(t, err)
	require.Equal(t, []Descriptor{
		{FD: 3, Mount: 0, Path: "tmp/a.db", Read: true, Write: true, Offset: 7},
		{FD: 7, Mount: 0, Path: ".", Dir: true, Read: true},
		{FD: 9, Mount: StdlibMount, Path: "share/font.ttf", Read: true, Offset: 12},
	}, s.Header.Descriptors)

	for name, items := range map[string]string{
		"stdio number":       `{"fd":2,"mount":0,"path":"a","read":true}`,
		"number past MaxFD":  fmt.Sprintf(`{"fd":%d,"mount":0,"path":"a","read":true}`, MaxFD),
		"same number twice":  `{"fd":3,"mount":0,"path":"a","read":true},{"fd":3,"mount":0,"path":"b","read":true}`,
		"out of order":       `{"fd":4,"mount":0,"path":"a","read":true},{"fd":3,"mount":0,"path":"b","read":true}`,
		"no such mount":      `{"fd":3,"mount":1,"path":"a","read":true}`,
		"negative mount":     `{"fd":3,"mount":-2,"path":"a","read":true}`,
		"stdlib for writing": `{"fd":3,"mount":-1,"path":"a","read":true,"write":true}`,
		"absolute path":      `{"fd":3,"mount":0,"path":"/etc/passwd","read":true}`,
		"escaping path":      `{"fd":3,"mount":0,"path":"../x","read":true}`,
		"unclean path":       `{"fd":3,"mount":0,"path":"a/../../x","read":true}`,
		"empty path":         `{"fd":3,"mount":0,"path":"","read":true}`,
		"path too long":      `{"fd":3,"mount":0,"path":"` + strings.Repeat("a", MaxPath+1) + `","read":true}`,
		"negative offset":    `{"fd":3,"mount":0,"path":"a","read":true,"offset":-1}`,
		"no access":          `{"fd":3,"mount":0,"path":"a"}`,
		"writable directory": `{"fd":3,"mount":0,"path":"a","dir":true,"read":true,"write":true}`,
		"unknown field":      `{"fd":3,"mount":0,"path":"a","read":true,"rights":1}`,
		"too many":           strings.TrimSuffix(strings.Repeat(`{"fd":3,"mount":0,"path":"a","read":true},`, MaxDescriptors+1), ","),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(craftWithBody(Version, descriptorHeader(items), body)), testLimits)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// TestDecodeVersion1 shows that a version 1 snapshot (before descriptors)
// still decodes, and that one claiming descriptors is refused.
func TestDecodeVersion1(t *testing.T) {
	body := emptyBody(t)
	noFiles := `{"guest":"g","base":"b","memory_size":65536,"asyncify_buffer":8,"mounts":[{"path":"/","in_memory":true}],"args":[],"globals":[],"runs":0,"fuel_used":0}`
	s, err := Decode(bytes.NewReader(craftWithBody(1, noFiles, body)), testLimits)
	require.NoError(t, err)
	assert.Empty(t, s.Header.Descriptors)

	_, err = Decode(bytes.NewReader(craftWithBody(1, descriptorHeader(`{"fd":3,"mount":0,"path":"a","read":true}`), body)), testLimits)
	require.ErrorIs(t, err, ErrCorrupt)

	_, err = Decode(bytes.NewReader(craftWithBody(Version+1, noFiles, body)), testLimits)
	require.ErrorIs(t, err, ErrVersion)
	_, err = Decode(bytes.NewReader(craftWithBody(0, noFiles, body)), testLimits)
	require.ErrorIs(t, err, ErrVersion)
}

// TestDecodeBoundsDescriptors shows that a header of the most descriptors
// with the longest paths it can hold costs the decoder a bounded amount.
func TestDecodeBoundsDescriptors(t *testing.T) {
	body := emptyBody(t)
	item := `{"fd":%d,"mount":0,"path":"` + strings.Repeat("a", 200) + `","read":true}`
	var items []string
	for i := 0; i < MaxDescriptors; i++ {
		items = append(items, fmt.Sprintf(item, i+3))
	}
	data := craftWithBody(Version, descriptorHeader(strings.Join(items, ",")), body)
	require.Less(t, len(data), MaxHeader)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := Decode(bytes.NewReader(data), testLimits)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Len(t, s.Header.Descriptors, MaxDescriptors)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8*MaxHeader), "decoding allocated too much")
}

// discard is a Target that keeps nothing.
type discard struct{ pages, files int }

func (d *discard) Header(*Header) error      { return nil }
func (d *discard) Page(uint32, []byte) error { d.pages++; return nil }
func (d *discard) File(_ File, data io.Reader, _ int64) error {
	d.files++
	_, err := io.Copy(io.Discard, data)
	return err
}

// Stream holds neither the encoded body nor the decoded snapshot: what it
// allocates for 24 MiB of pages and a 16 MiB file that do not compress is
// a few MiB (the decompressor's window and buffers), whatever the size,
// and Encode's about twice that (the compressor's).
// Decode used to read the whole body into memory before decoding it, and
// Encode to compress it into memory before writing it: neither does.
func TestStreamHoldsNoCopy(t *testing.T) {
	s := sample()
	s.Header.MemorySize = 32 << 20
	rnd := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	s.Pages = nil
	for i := range 24 << 20 / PageSize {
		s.Pages = append(s.Pages, Page{Index: uint32(i), Data: random(PageSize)})
	}
	s.Files[len(s.Files)-1].Data = random(16 << 20)
	var err error
	n := allocated(func() { err = Encode(io.Discard, s) })
	require.NoError(t, err)
	t.Logf("%d bytes allocated to encode it", n)
	assert.Less(t, n, uint64(16<<20), "the compressor's window and buffers, not the body")
	data := encode(t, s)
	lim := Limits{MaxSize: 64 << 20, MaxMemory: 32 << 20, MaxFileBytes: 32 << 20, MaxFiles: 100}
	var d discard
	n = allocated(func() { err = Stream(bytes.NewReader(data), lim, &d) })
	require.NoError(t, err)
	assert.Equal(t, len(s.Pages), d.pages)
	assert.Equal(t, len(s.Files), d.files)
	t.Logf("%d bytes allocated to stream a %d-byte snapshot", n, len(data))
	assert.Less(t, n, uint64(8<<20))

	// And a snapshot damaged past its header: refused as corrupt, though
	// its parts were handed over.
	data[len(data)-100] ^= 1
	err = Stream(bytes.NewReader(data), lim, &discard{})
	assert.ErrorIs(t, err, ErrCorrupt)
}
