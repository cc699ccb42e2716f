// Command volume keeps files between runs, sandboxes and processes: a
// directory of the host mounted at /data, with a quota. Everything else a
// run writes (/tmp, /work) is gone with its sandbox.
//
//	go run ./examples/volume          # in a temporary directory
//	go run ./examples/volume ./state  # run it twice: the count goes on
package main

import (
	"context"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io"
	"os"
	"path/filepath"

	"github.com/fumehood/fumehood/sandbox"
)

// counter counts its runs in the volume, and checks that the scratch file
// it leaves in /tmp does not outlive its sandbox.
const counter = `
import os, pathlib
visits = pathlib.Path("/data/visits.txt")
n = int(visits.read_text()) + 1 if visits.exists() else 1
visits.write_text(str(n))
with open("/data/log.txt", "a") as log:
    log.write(f"run {n}\n")
print(f"run {n}, scratch from an earlier run: {os.path.exists('/tmp/scratch')}")
open("/tmp/scratch", "w").write("gone with the sandbox")
`

// hog writes more than the quota allows.
const hog = `
try:
    with open("/data/big.bin", "wb") as f:
        f.write(b"x" * (2 << 20))
except OSError as e:
    print("refused:", e.strerror)
import os
print("big.bin holds", os.path.getsize("/data/big.bin"), "bytes")
`

// quota bounds what the guest may keep in the volume, counting what is
// there already. A write past it fails inside the guest and changes nothing.
var quota = wasi.Quota{MaxBytes: 1 << 20, MaxFiles: 100}

func main() {
	dir := ""
	if len(os.Args) > 1 {
		dir = os.Args[1]
	} else {
		tmp, err := os.MkdirTemp("", "fumehood-volume-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := run(context.Background(), os.Stdout, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run runs the counter three times over the volume in dir, then the hog.
func run(ctx context.Context, w io.Writer, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer py.Close()

	// HostDir confines the guest to dir: ".." and symbolic links resolve
	// inside it, even if something else changes dir meanwhile. Any afero.Fs
	// will do (afero.NewMemMapFs, a cloud store).
	host, err := wasi.HostDir(dir)
	if err != nil {
		return err
	}
	volume := sandbox.Mount{Path: "/data", FS: host, Quota: quota}
	runIn := func(code string) error {
		// A new sandbox each time, as for separate jobs: only /data carries over.
		sb, err := py.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{volume}})
		if err != nil {
			return err
		}
		defer sb.Close()
		res, err := sb.Run(ctx, code, nil)
		if err != nil && res != nil {
			err = fmt.Errorf("%w\n%s", err, res.Stderr) // res is nil if the run never started
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s", res.Stdout)
		return nil
	}
	for range 3 {
		if err := runIn(counter); err != nil {
			return err
		}
	}

	// The files are ordinary files of the host.
	log, err := os.ReadFile(filepath.Join(dir, "log.txt"))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "the host reads log.txt: %q\n", log)

	return runIn(hog)
}
