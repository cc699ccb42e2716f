package cpython

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// Profile-guided optimization (clang's IR-level PGO). The interpreter is
// built twice: once instrumented (-fprofile-generate, linked with LLVM's
// profile runtime built here for wasm32-wasi), which then runs a training
// workload on wazero and writes its counts, and once more with those
// counts (-fprofile-use), so that clang lays out, inlines and unrolls for
// the paths Python code takes. The CPU set takes 0.86-0.88x the CPU time
// (bench/README.md, issue 36). Nothing of the profile is kept: it is made
// again by each build, from the pinned inputs.
//
// The training workload is CPython's own PGO task, `python -m test --pgo`
// (the test modules its --enable-optimizations build trains on), run from
// the source's Lib directory; not the benchmark programs it is measured on.

// LLVMSource is the tarball of LLVM 19.1.7's sources (Debian's .orig of
// llvm-toolchain-19): the build takes compiler-rt's profile runtime from
// it, and internal/cxxrt the C++ runtime.
var LLVMSource = Input{
	Package: "llvm-toolchain-19", Version: "1:19.1.7-3~deb12u1", Suite: ToolchainSuite, Kind: Source,
	File:     "llvm-toolchain-19_19.1.7.orig.tar.xz",
	SHA256:   "ae498f3bc58ae2d9f64ef5f0c035c4240152bf015a5b7738b15c22e93bdc97ce",
	Upstream: "LLVM 19.1.7 sources (compiler-rt's profile runtime; libc++, libc++abi, libunwind)",
}

// profileSources are compiler-rt/lib/profile's files the runtime is built
// from: the instrumentation's support, the raw profile writer and the
// "other platform" registration (clang 19 registers each function's data
// at start-up on wasm32, which has no section-bounds symbols for it).
var profileSources = []string{"InstrProfiling.c", "InstrProfilingInternal.c", "InstrProfilingValue.c",
	"InstrProfilingBuffer.c", "InstrProfilingFile.c", "InstrProfilingMerge.c", "InstrProfilingMergeFile.c",
	"InstrProfilingNameVar.c", "InstrProfilingVersionVar.c", "InstrProfilingWriter.c",
	"InstrProfilingPlatformOther.c", "InstrProfilingUtil.c"}

// profileFlags build the runtime for WASI: wasi-libc's emulations of
// mmap (the runtime maps a profile only to merge into it, which the
// training does not ask for) and getpid; uname for the host name. LLVM
// 19's "other platform" file returns an undeclared MC/DC bitmap range,
// which this build has none of.
var profileFlags = []string{"-O2", "-DNDEBUG", "-D_WASI_EMULATED_MMAN", "-D_WASI_EMULATED_GETPID",
	"-DCOMPILER_RT_HAS_UNAME=1", "-DBitmapFirst=NULL", "-DBitmapLast=NULL"}

// profileShimHeader and profileShimSource give the runtime what wasi-libc
// lacks: madvise (used only to release the pages of a continuous-mode
// profile) and flock, which wasi-libc declares but does not define. The
// guest is one process and each training run writes a file of its own, so
// there is nothing to lock.
const (
	profileShimHeader = `/* fumehood: madvise for compiler-rt's profile runtime on WASI. */
#define MADV_DONTNEED 4
static inline int madvise(void *addr, unsigned long len, int advice) {
  (void)addr; (void)len; (void)advice;
  return -1;
}
`
	profileShimSource = `/* fumehood: flock for compiler-rt's profile runtime on WASI. */
int flock(int fd, int op) {
  (void)fd; (void)op;
  return 0;
}
`
)

// pgoGenerate and pgoUse are the cross build's extra C flags in its two
// builds; pgoUse's profile path is under the work directory w. Functions
// the training never ran are optimized as without a profile.
const pgoGenerate = "-fprofile-generate"

func pgoUse(w string) string {
	return "-fprofile-use=" + w + "/pgo/python.profdata -Wno-profile-instr-unprofiled"
}

// pgoTrainArgs are the training run's arguments to the interpreter:
// CPython's PGO task with a fixed random seed.
var pgoTrainArgs = []string{"-B", "-m", "test", "--pgo", "--randseed=1", "--timeout=0", "--tempdir=/tmp/regrtest"}

// pgoTrainEnv is the training run's environment.
var pgoTrainEnv = map[string]string{
	"LLVM_PROFILE_FILE": "/pgo/raw/python.profraw",
	"PYTHONPATH":        "/pgo/sysconfig",
	"PYTHONHASHSEED":    "0",
	"TMPDIR":            "/tmp",
	"HOME":              "/tmp",
}

// pgoFlags are PGO's lines in crossFlags.
func pgoFlags() []string {
	return []string{
		"pgo profile runtime: " + strings.Join(profileSources, " ") + " " + strings.Join(profileFlags, " ") +
			" shim " + pipeline.Digest([]byte(profileShimHeader+profileShimSource)),
		"pgo instrumented: OPT=-DNDEBUG " + OptFlags + " " + pgoGenerate,
		"pgo train: python " + strings.Join(pgoTrainArgs, " ") + " (Lib of the source without __pycache__, sysconfig data with the work directory as /build, wazero, fake clocks, detFS: fixed file times, inodes in the order seen, sorted directories, stdout not a file), env " + trainEnvFlag(),
		"pgo use: OPT=-DNDEBUG " + OptFlags + " " + pgoUse("$W"),
	}
}

// trainEnvFlag is pgoTrainEnv as K=V, sorted.
func trainEnvFlag() string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(pgoTrainEnv)) {
		kv = append(kv, k+"="+pgoTrainEnv[k])
	}
	return strings.Join(kv, " ")
}

// profileRuntime builds LLVM's profile runtime for wasm32-wasi into
// w/pgo/libclang_rt.profile.a from the LLVM tarball's compiler-rt.
func (b *builder) profileRuntime(ctx context.Context) error {
	src, obj := b.path("llvm"), b.path("pgo", "obj")
	for _, d := range []string{src, obj} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := b.run(ctx, src, nil, "tar", "-xf", b.files[LLVMSource.Package], "--strip-components=1",
		"--wildcards", "*/compiler-rt/lib/profile/*", "*/compiler-rt/include/profile/*"); err != nil {
		return err
	}
	header, shim := b.path("pgo", "wasi-shim.h"), b.path("pgo", "wasi-shim.c")
	if err := os.WriteFile(header, []byte(profileShimHeader), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(shim, []byte(profileShimSource), 0o644); err != nil {
		return err
	}
	cc := strings.Fields(b.cc())
	profile := filepath.Join(src, "compiler-rt", "lib", "profile")
	base := append(append([]string{}, cc[1:]...), profileFlags...)
	base = append(base, "-I"+filepath.Join(src, "compiler-rt", "include"), "-I"+profile, "-include", header)
	var objs []string
	compile := func(name, file string, extra ...string) error {
		o := filepath.Join(obj, strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))+".o")
		objs = append(objs, o)
		return b.run(ctx, obj, nil, name, append(append(append([]string{}, base...), extra...), "-c", file, "-o", o)...)
	}
	for _, s := range profileSources {
		if err := compile(cc[0], filepath.Join(profile, s)); err != nil {
			return err
		}
	}
	if err := compile(cc[0], shim); err != nil {
		return err
	}
	// The runtime's registration: a C++ static initializer that sets the
	// profile to be written at exit.
	if err := compile("clang++-19", filepath.Join(profile, "InstrProfilingRuntime.cpp"), "-fno-exceptions", "-fno-rtti"); err != nil {
		return err
	}
	return b.run(ctx, obj, nil, "llvm-ar-19", append([]string{"rcs", b.path("pgo", "libclang_rt.profile.a")}, objs...)...)
}

// pgoLibs are the instrumented link's extra libraries (make's LIBC, empty
// otherwise, at the end of the link line).
func (b *builder) pgoLibs() string {
	return b.path("pgo", "libclang_rt.profile.a") + " -lwasi-emulated-getpid -lwasi-emulated-mman"
}

// crossMakeInstrumented builds the instrumented interpreter.
func (b *builder) crossMakeInstrumented(ctx context.Context) error {
	return b.crossMakeWith(ctx, "OPT=-DNDEBUG "+OptFlags+" "+pgoGenerate, "LIBC="+b.pgoLibs())
}

// crossMakeOptimized builds the interpreter again, from clean, with the
// profile.
func (b *builder) crossMakeOptimized(ctx context.Context) error {
	if err := b.run(ctx, b.path("cross"), nil, "make", "-s", "clean"); err != nil {
		return err
	}
	return b.crossMakeWith(ctx, "OPT=-DNDEBUG "+OptFlags+" "+pgoUse(b.w))
}

// pgoTrain runs the training workload on the instrumented interpreter and
// merges its raw profile into w/pgo/python.profdata.
func (b *builder) pgoTrain(ctx context.Context) error {
	wasm, err := os.ReadFile(b.path("cross", "python.wasm"))
	if err != nil {
		return err
	}
	// The training reads the sysconfig data as the standard library will
	// (the work directory mapped to /build), or its strings, and so its
	// allocations and its profile, would differ from build to build.
	sysconfig := b.path("pgo", "sysconfig")
	if err := os.MkdirAll(sysconfig, 0o755); err != nil {
		return err
	}
	if err := b.copySysconfig(sysconfig); err != nil {
		return err
	}
	// The build's native python left compiled files in the source's
	// Lib/__pycache__, whose code names the work directory: the guest
	// reads them whole before finding them stale (detFS's times), and
	// their sizes differ from build to build.
	if err := removePycache(b.path(pySrc, "Lib")); err != nil {
		return err
	}
	if err := train(ctx, wasm, b.path(pySrc, "Lib"), sysconfig, b.path("pgo"), filepath.Join(b.w, "logs", "pgo-train.log")); err != nil {
		return err
	}
	return b.run(ctx, b.path("pgo"), nil, "llvm-profdata-19", "merge", "-o", b.path("pgo", "python.profdata"),
		b.path("pgo", "raw", "python.profraw"))
}

// removePycache removes the __pycache__ directories under dir.
func removePycache(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() != "__pycache__" {
			return err
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		return filepath.SkipDir
	})
}

// train runs the instrumented interpreter wasm on pgoTrainArgs with the
// source's Lib directory lib as its standard library (test package
// included) and the cross build's sysconfig data; dir holds the raw
// profile (dir/raw/python.profraw) and the guest's root (dir/root); the
// run's output goes to logFile.
func train(ctx context.Context, wasm []byte, lib, sysconfig, dir, logFile string) error {
	for _, d := range []string{"raw", "root/tmp", "lib-dynload"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	log, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer log.Close()
	// A root of its own (regrtest goes back to the directory it started
	// in, /, and works in /tmp), the rest mounted into it.
	mounts := []wasiMount{
		{filepath.Join(dir, "root"), "/", false},
		{lib, "/usr/lib/python3.13", true},
		{filepath.Join(dir, "lib-dynload"), "/usr/lib/python3.13/lib-dynload", true},
		{sysconfig, "/pgo/sysconfig", true},
		{filepath.Join(dir, "raw"), "/pgo/raw", false},
	}
	start := time.Now()
	code, err := runWASI(ctx, wasm, append([]string{"python"}, pgoTrainArgs...), pgoTrainEnv, mounts, log)
	fmt.Fprintf(log, "\nexit code %d after %v\n", code, time.Since(start).Round(time.Second))
	if err != nil {
		return fmt.Errorf("pgo training: %w (log: %s)", err, logFile)
	}
	// A failing test still trains (regrtest exits 2, say); an interpreter
	// that stops early does not.
	if code != 0 && code != 2 {
		return fmt.Errorf("pgo training: exit code %d (log: %s)", code, logFile)
	}
	if fi, err := os.Stat(filepath.Join(dir, "raw", "python.profraw")); err != nil || fi.Size() == 0 {
		return fmt.Errorf("pgo training wrote no profile (log: %s)", logFile)
	}
	return nil
}

// wasiMount is a host directory at a guest path.
type wasiMount struct {
	host, guest string
	readOnly    bool
}

// runWASI runs a WASI command on wazero with the given host directories
// mounted, stdout and stderr to out, and returns its exit code. Clocks and
// random numbers are wazero's deterministic defaults and the directories
// are seen through detFS, so a training run does the same work each time,
// on any machine.
func runWASI(ctx context.Context, wasm []byte, args []string, env map[string]string, mounts []wasiMount, out *os.File) (int, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return 0, err
	}
	fs := wazero.NewFSConfig()
	ino := &inodes{}
	for i, m := range mounts {
		host := sysfs.DirFS(m.host)
		if m.readOnly {
			host = &sysfs.ReadFS{FS: host}
		}
		fs = fs.(sysfs.FSConfig).WithSysFSMount(&detFS{FS: host, dev: uint64(i + 1), inodes: ino}, m.guest)
	}
	// A plain writer, not the *os.File: wazero would show the log file's
	// own inode and times.
	log := struct{ io.Writer }{out}
	mc := wazero.NewModuleConfig().WithName("").WithArgs(args...).WithStdout(log).WithStderr(log).WithFSConfig(fs)
	// In a fixed order: the guest's os.environ is built in this order, and
	// a different one is different work for the training run.
	for _, k := range slices.Sorted(maps.Keys(env)) {
		mc = mc.WithEnv(k, env[k])
	}
	mod, err := rt.InstantiateModule(ctx, compiled, mc)
	if mod != nil {
		mod.Close(ctx)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return int(exit.ExitCode()), nil
	}
	return 0, err
}

// crossMakeWith is crossMake with more make variables.
func (b *builder) crossMakeWith(ctx context.Context, vars ...string) error {
	args := append([]string{"-j" + strconv.Itoa(b.jobs), "-s", "LDFLAGS_NODIST=" + stackLDFlags()}, vars...)
	return b.run(ctx, b.path("cross"), nil, "make", args...)
}
