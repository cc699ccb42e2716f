package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/fumehood/fumehood/internal/wasifs"
)

// One-shot Python runs (Guest.Run, Sandbox.Run) report a Python exception
// as session runs do: the runner (runner.py) writes it to the sandbox's
// control directory, an in-memory mount at controlPath of fumehood's own,
// in the session driver's file format, at a path fresh for each run; the
// host reads it with readOutcome. The runner still prints the traceback on
// stderr, as python does, and exits with status 1.
//
// The outcome is what the guest reported: the host reads it only when the
// guest ended the run itself with status 1 (Result.Stop is StopExit, or
// StopMemory when it failed after its memory limit refused it memory), so
// nothing the guest writes there changes Result.Stop or the exit code; it
// can only turn an *ExitError with Code 1 into an *Exception, which guest
// code raising one does anyway.

// controlQuota bounds a sandbox's control directory: an outcome is four
// small files, and the texts in them are cut to the run's MaxOutput.
var controlQuota = Quota{MaxBytes: 64 << 20, MaxFiles: 16}

// mountControl gives a one-shot Python sandbox its control directory,
// mounted after every other preopen so that theirs keep their file
// descriptor numbers, with device number dev. The host's file methods do
// not reach it.
func (s *Sandbox) mountControl(fscfg sysfs.FSConfig, dev uint64) (sysfs.FSConfig, error) {
	ctl := afero.NewMemMapFs()
	fsys, err := wasifs.NewFS(ctl, wasifs.Options{Quota: wasifs.Quota(controlQuota), ReportErrno: s.errno.report,
		MaxOpen: DefaultMaxOpen, MaxListingBytes: DefaultMaxListingBytes, Device: dev})
	if err != nil {
		return nil, err
	}
	s.ctl, s.ctlFS = ctl, fsys
	return fscfg.WithSysFSMount(fsys, controlPath).(sysfs.FSConfig), nil
}

// outcomePath returns the path, as the guest sees it, at which a run's
// runner writes its outcome: in the control directory, fresh for each run.
// It is empty for a sandbox without a control directory. It empties the
// directory of what an Exec of the interpreter may have left there.
func (s *Sandbox) outcomePath() string {
	if s.ctl == nil {
		return ""
	}
	s.clearControl()
	var nonce [8]byte
	rand.Read(nonce[:])
	return controlPath + "/result-" + hex.EncodeToString(nonce[:])
}

// takeOutcome completes a one-shot run's Result (res, err, as the run
// returned them) with the outcome the runner wrote at the guest path at,
// each text capped at limit bytes, and empties the control directory for
// the next run. A guest that exited with status 1 on its own after
// reporting an exception raised it: the error is the *Exception (wrapped
// with ErrMemoryLimit when the run's Stop is StopMemory), also in
// res.Exception. Anything else is left as it was, an outcome that cannot
// be read included (the guest's code can write there too).
func (s *Sandbox) takeOutcome(res *Result, err error, at string, limit int) (*Result, error) {
	if s.ctl == nil || at == "" {
		return res, err
	}
	defer s.clearControl()
	var exit *ExitError
	if res == nil || res.Stop != StopExit && res.Stop != StopMemory || res.ExitCode != 1 ||
		!errors.As(err, &exit) || exit.Code != 1 {
		return res, err
	}
	out, rerr := readOutcome(s.ctl, strings.TrimPrefix(at, controlPath), limit)
	if rerr != nil || out.Exception == nil {
		return res, err
	}
	res.Exception = out.Exception
	if res.Stop == StopMemory {
		return res, fmt.Errorf("%w: %w", ErrMemoryLimit, out.Exception)
	}
	return res, out.Exception
}

// clearControl empties the sandbox's control directory: the outcome just
// read, and whatever the guest's code put there, which could otherwise
// fill its quota and keep the next run from reporting.
func (s *Sandbox) clearControl() { clearDir(s.ctlFS, ".") }

// clearDir removes everything in directory dir of fsys, through fsys,
// which gives the quota back.
func clearDir(fsys *wasifs.FS, dir string) {
	f, errno := fsys.OpenFile(dir, sys.O_RDONLY|sys.O_DIRECTORY, 0)
	if errno != 0 {
		return
	}
	dirents, _ := f.Readdir(-1)
	f.Close()
	for _, d := range dirents {
		if d.Name == "." || d.Name == ".." {
			continue
		}
		p := path.Join(dir, d.Name)
		if st, errno := fsys.Lstat(p); errno == 0 && st.Mode.IsDir() {
			clearDir(fsys, p)
			fsys.Rmdir(p)
		} else {
			fsys.Unlink(p)
		}
	}
}
