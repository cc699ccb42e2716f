package cpython

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fumehood/fumehood/internal/aptfetch"
	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// Build builds the guest and stores it in the cache, or returns the Info of
// the one already there (unless opts.Force). Every input is checked against
// its pinned SHA-256 before use; a mismatch is an error matching
// cache.ErrIntegrity that names the file, and nothing is stored. The build
// runs in a temporary directory under the cache directory, removed
// afterwards; an interrupted build leaves no entry behind, and the next
// build removes what it left of its directory.
func Build(ctx context.Context, opts *Options) (Info, error) {
	if opts == nil {
		opts = &Options{}
	}
	d, err := opts.dirs()
	if err != nil {
		return Info{}, err
	}
	if !opts.Force {
		if info, _, err := loadInfo(opts); err == nil {
			return info, nil
		}
	}
	start := time.Now()
	parts, err := opts.parts()
	if err != nil {
		return Info{}, err
	}
	if err := checkTools(append(append([]Tool(nil), Tools...), partTools(parts)...)); err != nil {
		return Info{}, err
	}
	tcInputs, err := ToolchainInputs(runtime.GOARCH, len(parts) > 0)
	if err != nil {
		return Info{}, err
	}
	local := map[string]string{}
	if err := localInputs(d, opts, parts, local); err != nil { // optional parts (variant.go)
		return Info{}, err
	}
	files, err := fetchInputs(ctx, d, opts, append(append(append([]Input(nil), Inputs...), partInputs(parts)...), tcInputs...))
	if err != nil {
		return Info{}, err
	}
	for k, v := range local {
		files[k] = v
	}
	if err := os.MkdirAll(d.tmp, 0o755); err != nil {
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	removeStale(d.tmp)
	work, err := os.MkdirTemp(d.tmp, "build-")
	if err != nil {
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.WriteFile(filepath.Join(work, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	b := &builder{w: work, files: files, jobs: opts.Jobs, toolchain: tcInputs}
	if needsCxxRuntime(parts) { // optional parts (matplotlib.go)
		if cxxRuntime == nil {
			return Info{}, ErrNoCxxRuntime
		}
		if b.cxxLibs, err = cxxRuntime.Build(ctx, opts.CacheDir, opts.Progress); err != nil {
			return Info{}, fmt.Errorf("cpython: the C++ runtime: %w", err)
		}
	}
	if b.jobs <= 0 {
		b.jobs = runtime.NumCPU()
	}
	steps := b.withParts(b.steps(), parts) // optional parts (variant.go)
	for i, s := range steps {
		if err := ctx.Err(); err != nil {
			return Info{}, err
		}
		opts.progress(cache.Progress{Stage: "build", Step: s.name, Done: int64(i), Total: int64(len(steps))})
		if err := s.run(ctx); err != nil {
			return Info{}, fmt.Errorf("cpython: build step %s: %w", s.name, err)
		}
	}
	wasm, err := os.ReadFile(filepath.Join(work, "cross", "python.wasm"))
	if err != nil {
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	if wasm, err = stripCustom(wasm); err != nil {
		return Info{}, fmt.Errorf("cpython: python.wasm: %w", err)
	}
	stdlib, err := os.ReadFile(filepath.Join(work, "stdlib.tar"))
	if err != nil {
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	info := Info{
		Recipe: Recipe, Python: PythonVersion, Key: Key(), Inputs: Inputs,
		Toolchain: b.tcVersion, ToolchainInputs: tcInputs, Flags: crossFlags("$W"),
		WasmSize: int64(len(wasm)), StdlibSize: int64(len(stdlib)),
	}
	if err := b.describeParts(&info, opts); err != nil { // optional parts (variant.go)
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	if err := d.saveGuest(ctx, opts, &info, wasm, stdlib, start); err != nil {
		return Info{}, err
	}
	return info, nil
}

// saveGuest stores a guest's interpreter and standard library, prepares
// the interpreter with Steps (so a guest brings no unmetered
// module), fills in info's digests, and writes info as the manifest, last
// (an interrupted save leaves no entry). Build and Import both end here,
// so an imported guest's digests are a local build's. A non-zero start
// records the build's duration.
func (d dirs) saveGuest(ctx context.Context, opts *Options, info *Info, wasm, stdlib []byte, start time.Time) error {
	var err error
	if info.WasmSHA256, err = d.store.Put(wasm); err != nil {
		return err
	}
	if info.StdlibSHA256, err = d.store.Put(stdlib); err != nil {
		return err
	}
	opts.progress(cache.Progress{Stage: "prepare"})
	info.PreparedSHA256, err = d.store.Run(ctx, info.WasmSHA256, Steps, func(s pipeline.Step, i, n int) {
		opts.progress(cache.Progress{Stage: "prepare", Step: s.ID(), Done: int64(i), Total: int64(n)})
	})
	if err != nil {
		return err
	}
	info.PreparedSteps = stepIDs(Steps)
	if !start.IsZero() {
		info.BuildSeconds = time.Since(start).Round(time.Second).Seconds()
	}
	mb, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("cpython: %w", err)
	}
	return writeAtomic(d.manifest, append(mb, '\n'))
}

// stripCustom removes the .debug* custom sections (there should be none:
// the build passes no -g).
func stripCustom(in []byte) ([]byte, error) {
	m, err := wasmbin.Parse(in)
	if err != nil {
		return nil, err
	}
	m.RemoveCustom(func(name string) bool { return strings.HasPrefix(name, ".debug") })
	return m.Encode(), nil
}

// CheckTools checks that every program in Tools is installed (the cross
// toolchain is fetched, not installed). The error matches ErrMissingTools
// and names the Debian packages to install; on a machine without apt it
// also matches ErrNoToolchain and says how to get the guest from another
// machine.
func CheckTools() error {
	return checkTools(Tools)
}

func checkTools(tools []Tool) error {
	var missing []string
	seen := map[string]bool{}
	for _, t := range tools {
		var err error
		if filepath.IsAbs(t.Command) {
			_, err = os.Stat(t.Command)
		} else {
			_, err = exec.LookPath(t.Command)
		}
		if err != nil && !seen[t.Package] {
			seen[t.Package] = true
			missing = append(missing, t.Package)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if seen["apt"] || seen["dpkg"] {
		return fmt.Errorf("%w (%s), %w: the build fetches its inputs and its toolchain with apt from Debian's archive, "+
			"so it runs on a Debian-family machine; %s", ErrMissingTools, strings.Join(missing, " "), ErrNoToolchain, elsewhere)
	}
	return fmt.Errorf("%w: install the Debian packages (as root): apt-get install %s", ErrMissingTools, strings.Join(missing, " "))
}

// fetchInputs returns the path of every input in list, verified, fetching
// the missing ones into the cache's sources directory. The fetched files
// are all verified before any is stored: one whose SHA-256 is not its pin
// is an error matching cache.ErrIntegrity that names it, and none is kept.
func fetchInputs(ctx context.Context, d dirs, opts *Options, list []Input) (map[string]string, error) {
	files := map[string]string{}
	var missing []Input
	for _, in := range list {
		p := filepath.Join(d.sources, in.File)
		if err := verifyFile(p, in); err == nil {
			files[in.Package] = p
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			// A damaged cached input: fetch it again.
			os.Remove(p)
		}
		missing = append(missing, in)
	}
	if len(missing) == 0 {
		return files, nil
	}
	suites := map[string]bool{}
	var suiteList []string
	for _, in := range list {
		if !suites[in.Suite] {
			suites[in.Suite] = true
			suiteList = append(suiteList, in.Suite)
		}
	}
	f, err := newFetcher(d.apt, suiteList...)
	if errors.Is(err, aptfetch.ErrNoMirror) {
		return nil, fmt.Errorf("%w, %w: %s", err, ErrNoToolchain, elsewhere)
	}
	if err != nil {
		return nil, err
	}
	// The package lists (about 50 MB) serve only this fetch: the next one
	// updates them anyway.
	defer os.RemoveAll(d.apt)
	opts.progress(cache.Progress{Stage: "fetch", Step: "apt-get update"})
	if err := f.Update(ctx); err != nil {
		// Another distribution's mirror (Ubuntu's) passes MachineMirror
		// but has no Debian suites.
		return nil, fmt.Errorf("%w\nthe build needs a Debian mirror in the machine's apt sources; where there is none, %s", err, elsewhere)
	}
	if err := os.MkdirAll(d.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("cpython: %w", err)
	}
	dl, err := os.MkdirTemp(d.tmp, "fetch-")
	if err != nil {
		return nil, fmt.Errorf("cpython: %w", err)
	}
	defer os.RemoveAll(dl)
	// The sources one by one, the binary packages (the toolchain's are
	// most of them) with one apt-get download.
	var binaries, names []string
	for i, in := range missing {
		if in.Kind == Binary {
			binaries = append(binaries, in.Package+"="+in.Version)
			names = append(names, in.Package)
			continue
		}
		opts.progress(cache.Progress{Stage: "fetch", Step: in.File, Done: int64(i), Total: int64(len(missing))})
		if err := f.Source(ctx, dl, in.Package, in.Version); err != nil {
			return nil, fmt.Errorf("cpython: fetch %s %s (%s): %w", in.Package, in.Version, in.Suite, err)
		}
		if err := verifyFile(filepath.Join(dl, in.File), in); err != nil {
			return nil, err
		}
	}
	if len(binaries) > 0 {
		opts.progress(cache.Progress{Stage: "fetch", Step: strings.Join(names, " "), Done: int64(len(missing) - len(binaries)), Total: int64(len(missing))})
		if err := f.Binary(ctx, dl, binaries...); err != nil {
			return nil, fmt.Errorf("cpython: fetch %s: %w", strings.Join(binaries, " "), err)
		}
		for _, in := range missing {
			if in.Kind != Binary {
				continue
			}
			if err := verifyFile(filepath.Join(dl, in.File), in); err != nil {
				return nil, err
			}
		}
	}
	if err := os.MkdirAll(d.sources, 0o755); err != nil {
		return nil, fmt.Errorf("cpython: %w", err)
	}
	for _, in := range missing {
		p := filepath.Join(d.sources, in.File)
		if err := os.Rename(filepath.Join(dl, in.File), p); err != nil {
			return nil, fmt.Errorf("cpython: %w", err)
		}
		files[in.Package] = p
	}
	return files, nil
}

// fetcher is what fetchInputs needs of an *aptfetch.Fetcher.
type fetcher interface {
	Update(ctx context.Context) error
	Source(ctx context.Context, dir, pkg, version string) error
	Binary(ctx context.Context, dir string, pkgVersions ...string) error
}

// newFetcher makes the fetcher; tests replace it.
var newFetcher = func(dir string, suites ...string) (fetcher, error) { return aptfetch.New(dir, suites...) }

// verifyFile checks path against in's SHA-256. A mismatch matches
// cache.ErrIntegrity and names the file.
func verifyFile(path string, in Input) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("cpython: %s: %w", in.File, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != in.SHA256 {
		return fmt.Errorf("%w: %s (%s %s) has sha256 %s, want %s", cache.ErrIntegrity, in.File, in.Package, in.Version, got, in.SHA256)
	}
	return nil
}

// removeStale removes the work directories of builds whose process is
// gone (an interrupted build).
func removeStale(tmp string) {
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		dir := filepath.Join(tmp, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && processAlive(pid) {
				continue
			}
		} else if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) < time.Hour {
			continue // a fetch or a build that has not written its pid yet
		}
		os.RemoveAll(dir)
	}
}

// writeAtomic writes b to path through a temporary file and a rename.
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cpython: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("cpython: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cpython: write %s: %w", path, err)
	}
	return nil
}

// run runs a command in dir with env added to a clean base environment,
// its output going to a log; a failure returns the log's tail.
func (b *builder) run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	path := name
	if _, ok := toolchainPrograms[name]; ok {
		// exec looks a bare name up on this process's PATH, not the
		// build's: the toolchain's programs by their wrappers' paths.
		path = filepath.Join(b.toolchainBin(), name)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Env = append(b.baseEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	killGroupOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	log := filepath.Join(b.w, "logs")
	_ = os.MkdirAll(log, 0o755)
	b.logs++
	_ = os.WriteFile(filepath.Join(log, fmt.Sprintf("%02d-%s.log", b.logs, filepath.Base(name))), out.Bytes(), 0o644)
	if err != nil {
		s := out.String()
		if len(s) > 3000 {
			s = "..." + s[len(s)-3000:]
		}
		return fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), strings.ReplaceAll(dir, b.w, "$W"), err, s)
	}
	return nil
}

func (b *builder) baseEnv() []string {
	return []string{
		"PATH=" + b.toolchainBin() + ":" + os.Getenv("PATH"),
		"HOME=" + b.w,
		"LC_ALL=C",
		"TZ=UTC",
		"SOURCE_DATE_EPOCH=" + strconv.Itoa(SourceDateEpoch),
		"PYTHONHASHSEED=0",
		"PKG_CONFIG_PATH=",
		"PKG_CONFIG_LIBDIR=" + filepath.Join(b.w, "deps", "lib", "pkgconfig"),
	}
}
