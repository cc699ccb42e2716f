package sandbox

import (
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/internal/guests/cpython"
	"github.com/fumehood/fumehood/internal/snapshot"
)

// startupSource is fumehood's start-up code, run before the code of every
// Python run (see startup.py); runnerSource runs a one-shot run's code.
var (
	//go:embed startup.py
	startupCore string
	//go:embed startup_patches.py
	startupPatches string
	//go:embed startup_thread.py
	startupThread string
	//go:embed startup_pwd.py
	startupPwd string
	//go:embed startup_process.py
	startupProcess string
	//go:embed startup_multiprocessing.py
	startupMultiprocessing string
	//go:embed startup_mmap.py
	startupMmap string
	//go:embed startup_fix_threading.py
	startupFixThreading string
	//go:embed startup_fix_signal.py
	startupFixSignal string
	//go:embed startup_fix_multiprocessing.py
	startupFixMultiprocessing string
	//go:embed runner.py
	runnerSource string
	//go:embed outcome_writer.py
	outcomeWriterSource string

	startupSource = startupLazy() + startupCore
)

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

// oneShotStartup is the start-up code of a one-shot run from _start, which
// takes the lazy sources from its last fixed argument (oneShotArgs): the
// path of a file of them in the control directory (lazyFile), read only
// when one is needed, or, without a control directory, the sources
// packed. CPython's start-up costs some 700 instructions for each byte of
// its arguments, and most runs need none of the sources.
var oneShotStartup = "_fumehood_lazy = __import__('sys').argv.pop(8)\n" + startupCore

// lazyRaw is lazySources as a file: "name NUL source NUL ...".
var lazyRaw = func() []byte {
	var raw bytes.Buffer
	for i, l := range lazySources {
		if i > 0 {
			raw.WriteByte(0)
		}
		raw.WriteString(l.name + "\x00" + l.source)
	}
	return raw.Bytes()
}()

// lazyPacked is lazyRaw compressed (zlib, then base64), for a run without
// a control directory.
var lazyPacked = func() string {
	var z bytes.Buffer
	w, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	w.Write(lazyRaw)
	w.Close()
	return base64.StdEncoding.EncodeToString(z.Bytes())
}()

// lazyFile is the name of the lazy sources' file in a one-shot run's
// control directory.
const lazyFile = "lazy"

// lazyArg puts the lazy sources in the sandbox's control directory for a
// one-shot run from _start and returns the argument that tells
// oneShotStartup where they are. The directory is emptied after the run.
func (s *Sandbox) lazyArg() string {
	if s.ctlFS == nil {
		return lazyPacked
	}
	f, errno := s.ctlFS.OpenFile(lazyFile, sys.O_CREAT|sys.O_TRUNC|sys.O_WRONLY, 0o444)
	if errno != 0 {
		return lazyPacked
	}
	_, errno = f.Write(lazyRaw)
	if cerr := f.Close(); errno == 0 {
		errno = cerr
	}
	if errno != 0 {
		return lazyPacked
	}
	return controlPath + "/" + lazyFile
}

// oneShotBootstrap is the interpreter's -c code in a one-shot run: it runs
// the start-up code and the runner, which name their functions' code
// "<fumehood>" so that their frames are not mistaken for the user's code.
const oneShotBootstrap = "exec(__import__('sys').argv[1])"

// oneShotArgs are the interpreter's arguments for running code one-shot
// under name (default "<string>") in a sandbox whose mounts quotas
// describes (Sandbox.mountQuotas), before the program's own arguments.
// The runner writes an exception's outcome at the guest path result, each
// text cut to maxValue+1 bytes, with outcome_writer.py (oneshot_outcome.go);
// lazy is lazyArg's.
//
// -u: unbuffered, so output written before a stop is kept.
// -B: never write .pyc files.
func oneShotArgs(code, name, quotas, result string, maxValue int, lazy string) []string {
	if name == "" {
		name = "<string>"
	}
	return []string{"-u", "-B", "-c", oneShotBootstrap, oneShotStartup + runnerSource, code, name, quotas, result, strconv.Itoa(maxValue), outcomeWriterSource, lazy}
}

//go:embed driver.py
var driverOnly string

// driverSource is what a session's interpreter runs: the start-up code
// every Python run gets (startup.py), then the driver: how a request runs
// (cpython.DriverRun, the built guest driver's), then its loop
// (driver.py). The base image's cache name covers it (baseFileName).
var driverSource = startupSource + cpython.DriverRun + driverOnly

// controlPath is where a session's driver writes the outcome of each run:
// an in-memory directory of fumehood's own. Mounts may not use it.
const controlPath = "/.fumehood"

// driverArgs are the interpreter's arguments in a session.
func driverArgs() []string { return []string{"python", "-u", "-B", "-c", driverSource} }

// request is what the driver reads for one run.
type request struct {
	Code     *string           `json:"code,omitempty"`
	N        int64             `json:"n"`
	Result   string            `json:"result"`
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
	Name  string   `json:"name,omitempty"`
	Argv  []string `json:"argv,omitempty"`
	Final bool     `json:"final,omitempty"`
}

// request builds the driver's request for a run of code (nil: none) whose
// texts are capped at maxOut, and its JSON.
func (s *Session) request(code *string, maxOut int) (request, []byte, error) {
	req := request{Code: code, N: s.runs + 1, MaxValue: maxOut}
	if !s.g.driver {
		// The session driver writes the outcome to this file; the
		// built guest's returns it through memory.
		var nonce [8]byte
		rand.Read(nonce[:])
		req.Result = controlPath + "/result-" + hex.EncodeToString(nonce[:])
	}
	if s.sendEnv {
		req.Argv = []string{"-c"} // as python -c has it
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
	if s.g.driver && code != nil && !s.sendEnv && !s.reseed && utf8.ValidString(*code) {
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
