package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"unicode/utf8"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/snapshot"
)

// startupSource is fumehood's start-up code, run before the code of every
// Python run (guests/cpython/python/startup/startup.py): it is in every
// image.
var (
	startupCore               = startupFile("startup.py")
	startupPatches            = startupFile("startup_patches.py")
	startupThread             = startupFile("startup_thread.py")
	startupPwd                = startupFile("startup_pwd.py")
	startupProcess            = startupFile("startup_process.py")
	startupMultiprocessing    = startupFile("startup_multiprocessing.py")
	startupMmap               = startupFile("startup_mmap.py")
	startupFixThreading       = startupFile("startup_fix_threading.py")
	startupFixSignal          = startupFile("startup_fix_signal.py")
	startupFixMultiprocessing = startupFile("startup_fix_multiprocessing.py")

	startupSource = startupLazy() + startupCore
)

// startupFile is a file of the guest's start-up code (cpython.Code).
func startupFile(name string) string {
	b, err := fs.ReadFile(cpython.Code, "python/startup/"+name)
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return string(b)
}

// lazySources are the sources startup.py compiles only when they are
// needed, by name.
var lazySources = []struct{ name, source string }{
	{"patches", startupPatches},
	{"concurrent.futures.thread", startupThread},
	{"pwd", startupPwd},
	{"concurrent.futures.process", startupProcess},
	{"multiprocessing", startupMultiprocessing},
	{"mmap", startupMmap},
	{"fix threading", startupFixThreading},
	{"fix signal", startupFixSignal},
	{"fix multiprocessing.context", startupFixMultiprocessing},
}

// startupLazy is the Python statement that gives startup.py the sources it
// compiles only when they are needed, as the dict _fumehood_lazy: a JSON
// string is a Python string literal.
func startupLazy() string {
	m := map[string]string{}
	for _, l := range lazySources {
		m[l.name] = l.source
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // strings always marshal
	}
	return "_fumehood_lazy = " + string(b) + "\n"
}

// controlPath is an in-memory directory of fumehood's own in every Python
// sandbox and session, emptied after each one-shot run. Mounts may not use
// it. (The retired session build's driver wrote its outcomes there; the
// images of every layout still have it, so that their cache keys and the
// descriptors of existing snapshots stay what they were.)
const controlPath = "/.fumehood"

// request is what the driver reads for one run.
type request struct {
	Code     *pyText           `json:"code,omitempty"`
	N        int64             `json:"n"`
	Seed     string            `json:"seed,omitempty"`
	Env      map[string]string `json:"env"` // not omitempty: {} clears the base image's environment
	MaxValue int               `json:"max_value"`
	// Path is put at the front of sys.path, and Site names directories
	// whose sitecustomize module is run: the fumehood module's, sent with
	// the environment.
	Path []string `json:"path,omitempty"`
	Site []string `json:"site,omitempty"`
	// Mounts describes the session's mounts and their byte quotas to the
	// start-up code (Sandbox.mountQuotas), sent with the environment and
	// the seed.
	Mounts string `json:"mounts,omitempty"`
	// Name names the code in tracebacks (default <run-N>), Argv is
	// sys.argv, and Final runs atexit's functions after the code: a
	// one-shot run from a pre-initialized image (runImage).
	Name  pyText   `json:"name,omitempty"`
	Argv  []pyText `json:"argv,omitempty"`
	Final bool     `json:"final,omitempty"`
}

// pyText is a text of a request as Python's command line takes it: valid
// UTF-8 as it is, and each byte that is not a surrogate escape (U+DC80 to
// U+DCFF), which the driver's JSON decoder turns into the str that
// `python -c` would have made of the same bytes. (encoding/json would make
// each a U+FFFD.)
type pyText string

// MarshalJSON encodes t as a JSON string.
func (t pyText) MarshalJSON() ([]byte, error) {
	s := string(t)
	if utf8.ValidString(s) {
		return json.Marshal(s)
	}
	out := []byte{'"'}
	for len(s) > 0 {
		n := 0
		for n < len(s) {
			r, size := utf8.DecodeRuneInString(s[n:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			n += size
		}
		if n > 0 {
			valid, err := json.Marshal(s[:n])
			if err != nil {
				return nil, err
			}
			out = append(out, valid[1:len(valid)-1]...)
			s = s[n:]
			continue
		}
		out = fmt.Appendf(out, `\u%04x`, 0xdc00+int(s[0]))
		s = s[1:]
	}
	return append(out, '"'), nil
}

// request builds the driver's request for a run of code (nil: none) whose
// texts are capped at maxOut, and its JSON.
func (s *Session) request(code *string, maxOut int) (request, []byte, error) {
	req := request{Code: (*pyText)(code), N: s.runs + 1, MaxValue: maxOut}
	if s.sendEnv {
		req.Argv = []pyText{"-c"} // as python -c has it
		s.sb.setEnv(&req, s.env)
	}
	if s.sendEnv || s.reseed {
		// A new session, a fork or a resume (whose mounts' quotas may
		// differ from the saved session's).
		req.Mounts = s.sb.quotas
	}
	if s.reseed {
		var err error
		if req.Seed, err = newSeed(s.rand); err != nil {
			return req, nil, err
		}
	}
	if code != nil && !s.sendEnv && !s.reseed && utf8.ValidString(*code) {
		// Code alone, as most runs send it: compact, which the driver
		// reads without a JSON decoder (fhdriver.py).
		body := strconv.AppendInt(nil, req.N, 10)
		body = append(body, ' ')
		body = strconv.AppendInt(body, int64(req.MaxValue), 10)
		body = append(body, '\n')
		return req, append(body, *code...), nil
	}
	body, err := json.Marshal(&req)
	return req, body, err
}

// setEnv gives a request the environment env (an empty one for nil: it
// replaces the image's) and the directories of the host-call module.
func (s *Sandbox) setEnv(req *request, env map[string]string) {
	req.Env = env
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	req.Path, req.Site = s.hostPaths()
}

// newSeed draws a seed for the guest's random state from rnd, in hex.
func newSeed(rnd io.Reader) (string, error) {
	var seed [32]byte
	if _, err := io.ReadFull(rnd, seed[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(seed[:]), nil
}

// maxEnvBytes bounds a session's environment, keys and values: half of
// what a snapshot's header may hold.
const maxEnvBytes = snapshot.MaxHeader / 2

// checkEnv checks a session's environment: valid names and values, and no
// more than a snapshot's header can hold, so that every session can be
// snapshotted.
func checkEnv(env map[string]string) error {
	n := 0
	for _, k := range sortedKeys(env) {
		if k == "" || bytes.ContainsAny([]byte(k), "=\x00") || bytes.IndexByte([]byte(env[k]), 0) >= 0 {
			return fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
		n += len(k) + len(env[k])
	}
	if len(env) > snapshot.MaxEnv || n > maxEnvBytes {
		return fmt.Errorf("sandbox: an environment of %d variables and %d bytes (at most %d and %d)", len(env), n, snapshot.MaxEnv, maxEnvBytes)
	}
	return nil
}

// deriveSeed gives the random stream of a resumed deterministic session:
// from its seed and its run count, so that it does not replay the stream
// the session started with, and is the same on every resume of the same
// snapshot.
func deriveSeed(seed uint64, runs int64) uint64 {
	var b [8 + 8 + 24]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(runs))
	copy(b[16:], "fumehood resumed session")
	sum := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(sum[:])
}

func hasPrefixPath(p, dir string) bool {
	return len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}
