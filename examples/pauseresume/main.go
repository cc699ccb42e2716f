// Command pauseresume pauses a Python session in one process and resumes
// it in another: it runs code in a session, snapshots the session to a
// file, then starts itself again to resume the snapshot and go on where
// the first process stopped, with the same variables, functions, imports
// and in-memory files.
//
//	go run ./examples/pauseresume
//
// A snapshot resumes with the same guest build; store it anywhere (a file,
// a database, object storage) to move a session between machines or keep
// it while it is idle.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/fumehood/fumehood/sandbox"
)

// resumeEnv, when set, names the snapshot file the process resumes.
const resumeEnv = "FUMEHOOD_EXAMPLE_RESUME"

const before = `
import statistics
readings = [12.1, 11.8, 12.6]
def summary():
    return f"{len(readings)} readings, mean {statistics.mean(readings):.2f}"
with open("/work/notes.txt", "w") as f:
    f.write("paused after 3 readings\n")
summary()
`

const after = `
readings += [13.0, 12.4]
print(open("/work/notes.txt").read(), end="")
summary()
`

func main() {
	ctx := context.Background()
	var err error
	if name := os.Getenv(resumeEnv); name != "" {
		err = resume(ctx, os.Stdout, name)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run is the first process: it starts the session, pauses it to a file and
// has a second process resume it.
func run(ctx context.Context, w io.Writer) error {
	py, err := compile(ctx)
	if err != nil {
		return err
	}
	defer py.Close()
	s, err := py.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.Run(ctx, before, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "process %d: %s\n", os.Getpid(), res.Value)

	dir, err := os.MkdirTemp("", "fumehood-pauseresume-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "session.snap")
	// Written atomically: a crash leaves the old file or none, never half.
	if err := s.SnapshotFile(name); err != nil {
		return err
	}
	fi, err := os.Stat(name)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "process %d: paused to a %d KiB snapshot\n", os.Getpid(), fi.Size()>>10)
	s.Close() // the first process is done with it

	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), resumeEnv+"="+name)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the resuming process: %w", err)
	}
	return nil
}

// resume is the second process: it resumes the snapshot in name and goes on.
func resume(ctx context.Context, w io.Writer, name string) error {
	py, err := compile(ctx)
	if err != nil {
		return err
	}
	defer py.Close()
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	// Resuming checks the snapshot: another guest build, a damaged file or
	// other mounts are errors (ErrSnapshotGuest, ErrSnapshotCorrupt, ...).
	s, err := py.ResumeSession(ctx, f, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.Run(ctx, after, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "process %d: resumed; %s", os.Getpid(), res.Stdout)
	fmt.Fprintf(w, "process %d: %s\n", os.Getpid(), res.Value)
	return nil
}

// compile compiles the Python guest.
func compile(ctx context.Context) (*sandbox.Guest, error) {
	return sandbox.CompilePython(ctx, nil)
}
