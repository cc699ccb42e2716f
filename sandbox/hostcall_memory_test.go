package sandbox_test

import (
	"context"
	encjson "encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/sandbox"
)

// TestHostCallChannelFloodStaysBounded is the attack that once grew the host
// to gigabytes under a 32 MiB memory limit, run through the real guest: it
// writes megabyte requests to the channel without reading the answers, opens
// the channel thousands of times leaving partial frames, and calls a function
// with a huge name. The server's accounting stays within its bound, and the
// host's heap (sampled during the run) does not grow with the attack.
func TestHostCallChannelFloodStaysBounded(t *testing.T) {
	sb := newSandbox(t, &sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		"echo": func(_ context.Context, args encjson.RawMessage) (any, error) { return args, nil },
	}}})
	var peakHeap uint64
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // sample the heap while the guest attacks
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peakHeap = max(peakHeap, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	res, err := sb.Run(context.Background(), `
import os, errno, json
CALL = "/dev/fumehood/call"
def frame(header):
    h = json.dumps(header).encode()
    return len(h).to_bytes(4, "big") + (0).to_bytes(4, "big") + h
big = frame({"op": "call", "name": "echo", "args": {"pad": "x" * 1000000}})
fd = os.open(CALL, os.O_RDWR)
sent = again = 0
for i in range(300):
    try:
        sent += os.write(fd, big) > 0
    except BlockingIOError:
        again += 1
print("flood", sent, again)
fds = []
try:
    for i in range(2000):
        fds.append(os.open(CALL, os.O_RDWR))
except OSError as e:
    print("open", errno.errorcode[e.errno], len(fds))
for f in fds:
    try:
        os.write(f, big[:-1])
    except BlockingIOError:
        again += 1
print("partial", again)
for f in fds:
    os.close(f)
os.read(fd, len(big) + 1000)  # the echo's answer; the slot is free again
while os.read(fd, 1 << 20):
    pass
import fumehood
try:
    fumehood.call("<" * 1000000)
except fumehood.CallError as e:
    print("unknown", e.kind, len(e.message))
`, &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20, Timeout: 60 * time.Second}})
	close(stop)
	wg.Wait()
	require.NoError(t, err, "stderr: %s", res.Stderr)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	require.Len(t, lines, 4, "stdout: %s", res.Stdout)
	assert.Equal(t, "flood 1 299", lines[0], "one request in, the rest wait for the answer")
	// hostchan.MaxOpen handles in all, the mount's preopen and fd included.
	assert.Equal(t, fmt.Sprintf("open EMFILE %d", hostchan.MaxOpen-2), lines[1])
	assert.Equal(t, fmt.Sprintf("partial %d", 299+hostchan.MaxOpen-2), lines[2],
		"no other channel starts a frame while the answer is unread")
	assert.Regexp(t, `^unknown unknown \d+$`, lines[3])

	u := sandbox.HostUsage(sb)
	t.Logf("host-call usage: %+v; heap in use %d MiB before, peak %d MiB during", u,
		base.HeapInuse>>20, peakHeap>>20)
	assert.LessOrEqual(t, u.Peak, u.Bound)
	assert.Zero(t, u.Held, "nothing is held after the run")
	assert.Zero(t, u.Open)
	// The attack wrote 300 MB to the channel; a generous margin covers the
	// guest's own memory and the run's working set.
	assert.Less(t, int64(peakHeap)-int64(base.HeapInuse), int64(128<<20))
}
