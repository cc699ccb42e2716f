// Package aptfetch downloads Debian source and binary packages with apt's
// own clients through a private apt configuration: its own source list,
// package lists and download cache under a directory of the caller's, so
// the machine's apt state is never read for packages nor written. The mirror
// is taken from the machine's own apt sources at run time, so no host name
// is written anywhere in the repository; the archive keyring is the
// machine's.
package aptfetch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultKeyring is the keyring apt checks the archive's signatures with
// when the machine's sources do not name one: Debian's
// debian-archive-keyring package.
const DefaultKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// ErrNoMirror reports that no Debian mirror was found in the machine's apt
// sources.
var ErrNoMirror = errors.New("aptfetch: no Debian mirror in the machine's apt sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list)")

// Fetcher runs apt-get with a private configuration rooted at Dir.
type Fetcher struct {
	// Dir holds the private source list, package lists and cache.
	Dir string
	// Mirror is the archive's base URI, as in the machine's sources.
	Mirror string
	// Keyring is the OpenPGP keyring that signs the archive.
	Keyring string
	// Suites are the suites listed, each with a deb and a deb-src line
	// for the main component.
	Suites []string
}

// New returns a Fetcher rooted at dir for suites, with the mirror and
// keyring of the machine's own apt sources.
func New(dir string, suites ...string) (*Fetcher, error) {
	mirror, keyring, err := MachineMirror("/etc/apt")
	if err != nil {
		return nil, err
	}
	return &Fetcher{Dir: dir, Mirror: mirror, Keyring: keyring, Suites: suites}, nil
}

// MachineMirror returns the first Debian archive URI (not a -security or
// -updates suite) in the apt sources under etc, and the keyring its entry
// names (DefaultKeyring if none).
func MachineMirror(etc string) (uri, keyring string, err error) {
	files, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.sources"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, stanza := range strings.Split(string(b), "\n\n") {
			fields := map[string]string{}
			for _, line := range strings.Split(stanza, "\n") {
				if strings.HasPrefix(line, "#") {
					continue
				}
				if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, " ") {
					fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
				}
			}
			if !hasWord(fields["types"], "deb") && !hasWord(fields["types"], "deb-src") {
				continue
			}
			if !mainSuite(strings.Fields(fields["suites"])) {
				continue
			}
			uris := strings.Fields(fields["uris"])
			if len(uris) == 0 {
				continue
			}
			kr := fields["signed-by"]
			if kr == "" || strings.Contains(kr, "\n") || strings.Contains(kr, "BEGIN PGP") {
				kr = DefaultKeyring
			}
			return uris[0], kr, nil
		}
	}
	if f, err := os.Open(filepath.Join(etc, "sources.list")); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			w := strings.Fields(sc.Text())
			if len(w) < 3 || (w[0] != "deb" && w[0] != "deb-src") {
				continue
			}
			w = w[1:]
			kr := DefaultKeyring
			if strings.HasPrefix(w[0], "[") {
				for len(w) > 0 {
					opt := strings.Trim(w[0], "[]")
					if v, ok := strings.CutPrefix(opt, "signed-by="); ok {
						kr = v
					}
					end := strings.HasSuffix(w[0], "]")
					w = w[1:]
					if end {
						break
					}
				}
			}
			if len(w) >= 2 && mainSuite(w[1:2]) {
				return w[0], kr, nil
			}
		}
	}
	return "", "", ErrNoMirror
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func mainSuite(suites []string) bool {
	for _, s := range suites {
		if s != "" && !strings.Contains(s, "-") && !strings.Contains(s, "/") {
			return true
		}
	}
	return false
}

// SourceList returns the content of the private source list.
func (f *Fetcher) SourceList() string {
	var b strings.Builder
	for _, s := range f.Suites {
		for _, typ := range []string{"deb", "deb-src"} {
			fmt.Fprintf(&b, "%s [signed-by=%s] %s %s main\n", typ, f.Keyring, f.Mirror, s)
		}
	}
	return b.String()
}

// options are the apt options that make apt-get use only Dir.
func (f *Fetcher) options() []string {
	return []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(f.Dir, "sources.list"),
		"-o", "Dir::Etc::SourceParts=/dev/null",
		"-o", "Dir::State::Lists=" + filepath.Join(f.Dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(f.Dir, "cache"),
		"-o", "Acquire::Languages=none",
		"-o", "APT::Get::List-Cleanup=false",
		"-q",
	}
}

// Update writes the private source list and runs apt-get update with it.
func (f *Fetcher) Update(ctx context.Context) error {
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(f.Dir, d), 0o755); err != nil {
			return fmt.Errorf("aptfetch: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.Dir, "sources.list"), []byte(f.SourceList()), 0o644); err != nil {
		return fmt.Errorf("aptfetch: %w", err)
	}
	return f.run(ctx, f.Dir, append(f.options(), "update"))
}

// Source downloads the upstream tarball(s) of source package pkg at
// version into dir (apt-get source --download-only --tar-only).
func (f *Fetcher) Source(ctx context.Context, dir, pkg, version string) error {
	return f.run(ctx, dir, append(f.options(), "source", "--download-only", "--tar-only", pkg+"="+version))
}

// Binary downloads binary packages, each given as package=version, into
// dir with one apt-get download (which reads the package lists once).
func (f *Fetcher) Binary(ctx context.Context, dir string, pkgVersions ...string) error {
	return f.run(ctx, dir, append(append(f.options(), "download"), pkgVersions...))
}

func (f *Fetcher) run(ctx context.Context, dir string, args []string) error {
	bin, err := exec.LookPath("apt-get")
	if err != nil {
		return fmt.Errorf("aptfetch: apt-get is not installed (Debian package apt): %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("aptfetch: apt-get %s: %w\n%s", strings.Join(args[len(f.options()):], " "), err, tail(out.String(), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
