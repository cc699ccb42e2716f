package sandbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/wasi"
)

// volumeQuota is the command line's quota of a writable mount.
var volumeQuota = wasi.Quota{MaxBytes: 1 << 30, MaxFiles: 100_000}

// volumeConfigAt mounts vol at /data with volumeQuota.
func volumeConfigAt(vol afero.Fs) *sandbox.Config {
	return &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: vol, Quota: volumeQuota}}}
}

// TestVolumeChurnDoesNotStopStarts is the attack of issue 31 on a shared
// volume: one tenant renames the volume's directories and creates and
// removes files in a loop while other sandboxes start on it, through the
// volume a server shares (one HostDir) and through a HostDir opened for
// each. Before, a new sandbox walked the volume and failed with "counting
// the content ...: no such file or directory" when something vanished
// under the walk; no start may fail.
func TestVolumeChurnDoesNotStopStarts(t *testing.T) {
	py := sandboxtest.Python(t)
	dir := t.TempDir()
	const dirs = 20
	testenv.FillVolume(t, dir, dirs, 100)
	shared := hostDir(t, dir)

	stop := make(chan struct{})
	churn := testenv.ChurnVolume(dir, dirs, stop)

	const starters, each = 4, 50
	var failed atomic.Int64
	var starts sync.WaitGroup
	for w := range starters {
		starts.Go(func() {
			for i := range each {
				vol := shared
				if i%2 == 1 {
					own, err := wasi.HostDir(dir)
					if err != nil {
						failed.Add(1)
						continue
					}
					defer own.Close()
					vol = own
				}
				s, err := py.NewSandbox(volumeConfigAt(vol))
				if err != nil {
					if failed.Add(1) <= 3 {
						t.Log(err)
					}
					continue
				}
				if w == 0 && i%10 == 0 {
					res, err := s.Run(context.Background(), "import os\nprint(len(os.listdir('/data')) > 0)", nil)
					if assert.NoError(t, err) {
						assert.Equal(t, "True\n", string(res.Stdout))
					}
				}
				s.Close()
			}
		})
	}
	starts.Wait()
	close(stop)
	churn.Wait()
	assert.Zero(t, failed.Load(), "failed starts out of %d", starters*each)
}

// TestVolumeStartsDoNotWalk: sandboxes starting on a volume of 20,000
// files count it once, not at each start, whether they share one HostDir
// or open their own; and its quota bounds what the directory holds in all.
func TestVolumeStartsDoNotWalk(t *testing.T) {
	py := sandboxtest.Python(t)
	dir := t.TempDir()
	testenv.FillVolume(t, dir, 20, 1000)
	shared := hostDir(t, dir)
	before := wasi.Walks()
	first, err := py.NewSandbox(volumeConfigAt(shared))
	require.NoError(t, err)
	defer first.Close()
	for i := range 40 {
		vol := shared
		if i%2 == 1 {
			vol = hostDir(t, dir)
		}
		s, err := py.NewSandbox(volumeConfigAt(vol))
		require.NoError(t, err)
		s.Close()
	}
	assert.Equal(t, int64(1), wasi.Walks()-before, "41 starts, one walk")

	// One quota for the volume: two sandboxes together cannot store more.
	small := t.TempDir()
	q := &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, small), Quota: wasi.Quota{MaxBytes: 1 << 20}}}}
	a, err := py.NewSandbox(q)
	require.NoError(t, err)
	defer a.Close()
	q.Mounts[0].FS = hostDir(t, small)
	b, err := py.NewSandbox(q)
	require.NoError(t, err)
	defer b.Close()
	const fill = `
import errno
try:
    with open('/data/%s', 'wb') as f:
        f.write(b'x' * 700_000)
    print('stored')
except OSError as e:
    print(errno.errorcode[e.errno])
`
	assert.Equal(t, "stored\n", runOK(t, a, fmt.Sprintf(fill, "a")))
	assert.Equal(t, "ENOSPC\n", runOK(t, b, fmt.Sprintf(fill, "b")), "the volume holds 700 KB of its 1 MiB")
}

// BenchmarkVolumeStart measures the host CPU time a sandbox start (NewSandbox
// and Close) takes with a volume of 100,000 files mounted, against an empty
// volume in the same run (cpu-ms/start of each, and their ratio). The
// volumes are shared as a server shares them (one HostDir each), and each
// was mounted once before.
func BenchmarkVolumeStart(b *testing.B) {
	py := sandboxtest.Python(b)
	emptyDir, fullDir := b.TempDir(), b.TempDir()
	testenv.FillVolume(b, fullDir, 100, 1000)
	empty, full := hostDir(b, emptyDir), hostDir(b, fullDir)
	start := func(vol afero.Fs) {
		s, err := py.NewSandbox(volumeConfigAt(vol))
		require.NoError(b, err)
		s.Close()
	}
	start(empty)
	start(full)
	const starts = 10
	var emptyCPU, fullCPU time.Duration
	walks := wasi.Walks()
	for b.Loop() {
		t0 := sandbox.ProcessCPU(b)
		for range starts {
			start(empty)
		}
		t1 := sandbox.ProcessCPU(b)
		for range starts {
			start(full)
		}
		emptyCPU += t1 - t0
		fullCPU += sandbox.ProcessCPU(b) - t1
	}
	n := float64(b.N * starts)
	b.ReportMetric(float64(emptyCPU.Microseconds())/1e3/n, "empty-cpu-ms/start")
	b.ReportMetric(float64(fullCPU.Microseconds())/1e3/n, "100k-cpu-ms/start")
	b.ReportMetric(float64(fullCPU)/float64(emptyCPU), "100k/empty")
	b.ReportMetric(float64(wasi.Walks()-walks)/n/2, "walks/start")
}
