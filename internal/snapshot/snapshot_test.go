package snapshot

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

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

func FuzzDecode(f *testing.F) {
	for _, s := range []*Snapshot{sample(), {Header: sample().Header}} {
		e := encode(f, s)
		f.Add(e[:len(e)-sha256.Size]) // the checksum is added back
	}
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
		if len(again.Pages) != len(s.Pages) || len(again.Files) != len(s.Files) {
			t.Fatal("re-encoded snapshot differs")
		}
	}
}
