package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// The WASI preview 1 conformance programs live beside the repository, in
// ../shared/wasi-testsuite; they are data, read in place and never copied
// into the repository.
func testsuiteDir(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		require.NotEqual(t, "/", dir, "no go.mod above the test")
	}
	return filepath.Join(filepath.Dir(dir), "shared", "wasi-testsuite")
}

// suiteSpec is a test program's JSON specification (the legacy form, the
// only one the preview 1 programs use).
type suiteSpec struct {
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Root     string            `json:"root"`
	ExitCode int               `json:"exit_code"`
	Stdout   *string           `json:"stdout"`
}

type suiteCase struct {
	name, wasm string
	spec       suiteSpec
}

func loadSuite(t *testing.T, root string) []suiteCase {
	wasms, err := filepath.Glob(filepath.Join(root, "tests", "*", "testsuite", "wasm32-wasip1", "*.wasm"))
	require.NoError(t, err)
	var cases []suiteCase
	for _, w := range wasms {
		c := suiteCase{wasm: w}
		lang := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(w))))
		c.name = lang + "/" + strings.TrimSuffix(filepath.Base(w), ".wasm")
		if b, err := os.ReadFile(strings.TrimSuffix(w, ".wasm") + ".json"); err == nil {
			require.NoError(t, json.Unmarshal(b, &c.spec), c.name)
		}
		cases = append(cases, c)
	}
	return cases
}

// copyDir copies a test's root directory into dst, an afero.Fs.
func copyDir(t *testing.T, src string, dst afero.Fs) {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		name := "/" + filepath.ToSlash(rel)
		if d.IsDir() {
			return dst.MkdirAll(name, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return afero.WriteFile(dst, name, b, 0o644)
	})
	require.NoError(t, err)
}

// suiteOutcome is how one program ended on one filesystem.
type suiteOutcome struct {
	pass bool
	why  string
}

func runSuiteCase(t *testing.T, g *Guest, c suiteCase, fsys string) suiteOutcome {
	ctx := context.Background()
	cfg := &Config{Env: c.spec.Env, Limits: Limits{Timeout: 20 * time.Second}}
	fscfg := wazero.NewFSConfig()
	var sb *Sandbox
	if c.spec.Root != "" {
		src := filepath.Join(filepath.Dir(c.wasm), c.spec.Root)
		switch fsys {
		case "wazero":
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(src)))
			fscfg = wazero.NewFSConfig().WithDirMount(dir, "/")
		case "memory":
			mem := afero.NewMemMapFs()
			copyDir(t, src, mem)
			var err error
			cfg.Mounts = []Mount{{Path: "/", FS: mem}}
			sb, err = g.NewSandbox(cfg)
			require.NoError(t, err)
		case "hostdir":
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(src)))
			host, err := wasi.HostDir(dir)
			require.NoError(t, err)
			cfg.Mounts = []Mount{{Path: "/", FS: host}}
			sb, err = g.NewSandbox(cfg)
			require.NoError(t, err)
		}
	}
	if sb == nil {
		// No mounts at all, or wazero's own directory mount.
		var err error
		sb, err = g.NewSandbox(cfg)
		require.NoError(t, err)
		sb.fscfg = fscfg
	}
	res, err := sb.Exec(ctx, nil, c.spec.Args...)
	if res == nil {
		return suiteOutcome{why: err.Error()}
	}
	if res.ExitCode != c.spec.ExitCode {
		msg := ""
		if err != nil {
			msg, _, _ = strings.Cut(err.Error(), "\n")
		}
		return suiteOutcome{why: fmt.Sprintf("exit code %d, want %d: %s %s", res.ExitCode, c.spec.ExitCode, msg, panicLine(res.Stderr))}
	}
	if c.spec.Stdout != nil && string(res.Stdout) != *c.spec.Stdout {
		return suiteOutcome{why: fmt.Sprintf("stdout %q, want %q", res.Stdout, *c.spec.Stdout)}
	}
	return suiteOutcome{pass: true}
}

// panicLine picks the line of a program's stderr that says why it failed.
func panicLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i, l := range lines {
		if strings.Contains(l, "panicked at") && i+1 < len(lines) {
			return lines[i+1]
		}
	}
	return lines[len(lines)-1]
}

// TestWASITestsuite runs every WASI preview 1 conformance program three
// times: on wazero's own host-directory filesystem (the baseline), on the
// afero-backed in-memory root, and on an afero-backed host directory. Each
// program the baseline passes must pass on ours. It logs the counts and
// every program skipped, with the reason.
func TestWASITestsuite(t *testing.T) {
	root := testsuiteDir(t)
	if _, err := os.Stat(root); err != nil {
		t.Skipf("the WASI test suite is not beside the repository (%s)", root)
	}
	cases := loadSuite(t, root)
	require.NotEmpty(t, cases)

	counts := map[string]int{}
	var skips []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wasm, err := os.ReadFile(c.wasm)
			require.NoError(t, err)
			g, err := Compile(context.Background(), wasm, nil)
			require.NoError(t, err)
			defer g.Close()

			base := runSuiteCase(t, g, c, "wazero")
			if base.pass {
				counts["wazero"]++
			}
			for _, fsys := range []string{"memory", "hostdir"} {
				got := runSuiteCase(t, g, c, fsys)
				if got.pass {
					counts[fsys]++
					continue
				}
				if !base.pass {
					skips = append(skips, fmt.Sprintf("%s on %s: wazero's own filesystem fails it too (%s)", c.name, fsys, base.why))
					continue
				}
				if fsys == "memory" && (strings.Contains(got.why, "symlink") || strings.Contains(c.name, "symlink") && strings.Contains(got.why, "NOSYS")) {
					skips = append(skips, fmt.Sprintf("%s on memory: afero's MemMapFs has no symbolic links (%s)", c.name, got.why))
					continue
				}
				assert.True(t, got.pass, "%s on %s: %s", c.name, fsys, got.why)
			}
		})
	}
	sort.Strings(skips)
	t.Logf("%d programs: wazero's filesystem passed %d, the afero in-memory root %d, an afero host directory %d",
		len(cases), counts["wazero"], counts["memory"], counts["hostdir"])
	for _, s := range skips {
		t.Logf("skip: %s", s)
	}
}
