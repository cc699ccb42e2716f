package main

import (
	"path"
	"strings"
	"testing"
)

// FuzzMountFlag checks that the --mount parser never panics and that a
// mount it accepts has an absolute, clean guest path without a colon, is
// read-only exactly when asked with :ro, and has an absolute host
// directory. (--volume shares the parser but creates directories, so it is
// not fuzzed.)
func FuzzMountFlag(f *testing.F) {
	dir := f.TempDir()
	for _, s := range []string{dir + ":/data", dir + ":/data:ro", dir + ":/data:rw", ":/x", dir + ":data", dir + ":/a/../../b", "a:b:c:d", dir + ":/:ro", "\x00:/x",
		dir + ":/m:RO", dir + ":/m:Ro", dir + ":/m:r", dir + ":/m:", dir + ":/m:ro:ro", dir + ":/m:rw:ro", dir + ":/m:ro ", dir + ":/m:readonly"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var m mountFlags
		if err := m.add(false)(v); err != nil {
			if len(m) != 0 {
				t.Fatalf("%q: error %v, but a mount was added", v, err)
			}
			return
		}
		if len(m) != 1 {
			t.Fatalf("%q: %d mounts", v, len(m))
		}
		if p := m[0].Path; !path.IsAbs(p) || path.Clean(p) != p {
			t.Fatalf("%q: guest path %q", v, p)
		}
		if m[0].FS == nil {
			t.Fatalf("%q: no filesystem", v)
		}
		if strings.Contains(m[0].Path, ":") {
			t.Fatalf("%q: guest path %q holds a colon", v, m[0].Path)
		}
		if m[0].ReadOnly != strings.HasSuffix(v, ":ro") {
			t.Fatalf("%q: read-only %v", v, m[0].ReadOnly)
		}
	})
}

// FuzzEnvFlag checks that the --env parser never panics and keeps exactly
// the key and value it was given.
func FuzzEnvFlag(f *testing.F) {
	for _, s := range []string{"A=1", "A==", "=x", "A", "", "K=v=w", "\x00=\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := envFlag{}
		if err := e.Set(s); err != nil {
			return
		}
		k, v, _ := strings.Cut(s, "=")
		if len(e) != 1 || e[k] != v || k == "" {
			t.Fatalf("%q: got %v", s, e)
		}
	})
}
