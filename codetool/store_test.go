package codetool_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"
	_ "github.com/fumehood/fumehood/sessionstore/natsstore" // nats:// URLs
	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// storeKey is the replicas' operator key.
var storeKey = []byte("codetool replicas key, 32 bytes.")

// increment adds one to x, which the conversation's first call creates.
const increment = "x = globals().get('x', 0) + 1; x"

// replicaEnv names the store URL of a replica process; replicaLease its
// lease ttl.
const (
	replicaEnv      = "FUMEHOOD_TEST_REPLICA_STORE"
	replicaLease    = "FUMEHOOD_TEST_REPLICA_LEASE"
	replicaReadOnly = "FUMEHOOD_TEST_REPLICA_READONLY"
	// replicaMaxSessions is the replica tool's MaxSessions.
	replicaMaxSessions = "FUMEHOOD_TEST_REPLICA_MAX_SESSIONS"
)

// TestStoreReplicaProcess is a replica when run as a child of the tests
// below: it serves the calls written on its standard input, one JSON
// object a line, on a tool sharing their store ("memory": a tool without
// one), each as it comes (so a caller that sends before reading gets
// results in any order, each with its call's ID), and writes each result.
func TestStoreReplicaProcess(t *testing.T) {
	url := os.Getenv(replicaEnv)
	if url == "" {
		t.Skip("a replica process for the store tests")
	}
	ttl, _ := time.ParseDuration(os.Getenv(replicaLease))
	if os.Getenv(replicaReadOnly) != "" {
		if err := seeReadOnly(url); err != nil {
			json.NewEncoder(os.Stdout).Encode(replicaResult{IsError: true, Error: err.Error()})
			return
		}
	}
	maxSessions, _ := strconv.Atoi(os.Getenv(replicaMaxSessions))
	o := &codetool.Options{MaxSessions: maxSessions, LeaseTTL: ttl,
		Limits: sandbox.Limits{Timeout: time.Minute, Fuel: sandbox.UnlimitedFuel}}
	if url != "memory" {
		st, err := sessionstore.Open(context.Background(), url, &sessionstore.Options{Key: storeKey})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		o.Store = st
	}
	tool := newTool(t, o)
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	if os.Getenv(replicaReadOnly) != "" {
		require.NoError(t, out.Encode(replicaResult{Error: "ready"}))
	}
	var wg sync.WaitGroup
	for in.Scan() {
		var c replicaCall
		require.NoError(t, json.Unmarshal(in.Bytes(), &c))
		wg.Go(func() {
			r := tool.Call(context.Background(), c.Conversation, args(c.Code))
			mu.Lock()
			defer mu.Unlock()
			assert.NoError(t, out.Encode(replicaResult{ID: c.ID, Value: r.Value, Error: r.Error, IsError: r.IsError}))
		})
	}
	wg.Wait()
}

type replicaCall struct {
	ID                 int
	Conversation, Code string
}

type replicaResult struct {
	ID      int
	Value   *string
	Error   string
	IsError bool
}

// storeTool is a tool on the store at url with the replicas' key.
func storeTool(t *testing.T, url string, leaseTTL time.Duration) *codetool.Tool {
	t.Helper()
	st, err := sessionstore.Open(context.Background(), url, &sessionstore.Options{Key: storeKey})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return newTool(t, &codetool.Options{Store: st, LeaseTTL: leaseTTL,
		Limits: sandbox.Limits{Timeout: time.Minute, Fuel: sandbox.UnlimitedFuel}})
}

// replica is a replica process.
type replica struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *json.Decoder

	mu      sync.Mutex // for call: writing to in, and waiting
	next    int
	waiting map[int]chan replicaResult
}

func startReplica(t testing.TB, url string, leaseTTL time.Duration) *replica {
	t.Helper()
	return startReplicaCmd(t, replicaCmd(url, leaseTTL))
}

// replicaCmd is the command of a replica process.
func replicaCmd(url string, leaseTTL time.Duration) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreReplicaProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), replicaEnv+"="+url, replicaLease+"="+leaseTTL.String())
	return cmd
}

func startReplicaCmd(t testing.TB, cmd *exec.Cmd) *replica {
	t.Helper()
	sandboxtest.Built(t)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &replica{cmd: cmd, in: in, out: json.NewDecoder(out)}
}

// send asks the replica for a call; result reads its outcome.
func (r *replica) send(t testing.TB, conversation, code string) {
	t.Helper()
	b, _ := json.Marshal(replicaCall{Conversation: conversation, Code: code})
	_, err := r.in.Write(append(b, '\n'))
	require.NoError(t, err)
}

func (r *replica) result(t testing.TB) replicaResult {
	t.Helper()
	var res replicaResult
	require.NoError(t, r.out.Decode(&res))
	return res
}

// call makes a call and waits for its result; callers may call at once.
// A replica used through call is not read with result.
func (r *replica) call(conversation, code string) (replicaResult, error) {
	r.mu.Lock()
	if r.waiting == nil {
		r.waiting = map[int]chan replicaResult{}
		go r.dispatch()
	}
	r.next++
	id, ch := r.next, make(chan replicaResult, 1)
	r.waiting[id] = ch
	b, _ := json.Marshal(replicaCall{ID: id, Conversation: conversation, Code: code})
	_, err := r.in.Write(append(b, '\n'))
	r.mu.Unlock()
	if err != nil {
		return replicaResult{}, err
	}
	res, ok := <-ch
	if !ok {
		return replicaResult{}, errors.New("the replica process ended")
	}
	return res, nil
}

// dispatch hands the replica's results to their calls.
func (r *replica) dispatch() {
	for {
		var res replicaResult
		err := r.out.Decode(&res)
		r.mu.Lock()
		if err != nil {
			for id, ch := range r.waiting {
				close(ch)
				delete(r.waiting, id)
			}
			r.mu.Unlock()
			return
		}
		if ch := r.waiting[res.ID]; ch != nil {
			ch <- res
			delete(r.waiting, res.ID)
		}
		r.mu.Unlock()
	}
}

// stores are the store URLs the replica tests run on: a directory and a
// real NATS server in this process.
func stores(t *testing.T) map[string]string {
	return map[string]string{"dir": t.TempDir(), "nats": natstest.Run(t).URL()}
}

// TestStoreReplicasAlternate: two replicas, this process and another,
// take turns on one conversation for 100 calls of x += 1: x is 100.
func TestStoreReplicasAlternate(t *testing.T) {
	for name, url := range stores(t) {
		t.Run(name, func(t *testing.T) {
			here := storeTool(t, url, 0)
			there := startReplica(t, url, 0)
			var v string
			for i := range 100 {
				if i%2 == 0 {
					r := here.Call(context.Background(), "alternate", args(increment))
					require.False(t, r.IsError, r.Text())
					v = *r.Value
				} else {
					there.send(t, "alternate", increment)
					r := there.result(t)
					require.False(t, r.IsError, r.Error)
					v = *r.Value
				}
				require.Equal(t, strconv.Itoa(i+1), v, "call %d", i)
			}
			assert.Equal(t, "100", v)
		})
	}
}

// TestStoreReplicasRace: two replicas, this process and another, call
// one conversation at the same time, three callers each: every
// acknowledged call is counted exactly once, and none that failed is.
func TestStoreReplicasRace(t *testing.T) {
	for name, url := range stores(t) {
		t.Run(name, func(t *testing.T) {
			here := storeTool(t, url, 0)
			there := startReplica(t, url, 0)
			const callers, each = 3, 10
			var acked, failed atomic.Int64
			count := func(isError bool) {
				if isError {
					failed.Add(1)
				} else {
					acked.Add(1)
				}
			}
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range each {
						r, err := there.call("race", increment)
						assert.NoError(t, err)
						count(r.IsError)
					}
				})
				wg.Go(func() {
					for range each {
						count(here.Call(context.Background(), "race", args(increment)).IsError)
					}
				})
			}
			wg.Wait()
			r := here.Call(context.Background(), "race", args("x"))
			require.False(t, r.IsError, r.Text())
			assert.Equal(t, strconv.Itoa(int(acked.Load())), *r.Value, "every acknowledged call once")
			assert.Equal(t, int64(2*callers*each), acked.Load()+failed.Load())
			t.Logf("%d of %d calls acknowledged", acked.Load(), 2*callers*each)
		})
	}
}

// TestStoreReplicaKilled: a replica killed (SIGKILL) in the middle of a
// call loses that call only: once its lease expires, the other replica
// resumes the last committed state.
func TestStoreReplicaKilled(t *testing.T) {
	for name, url := range stores(t) {
		t.Run(name, func(t *testing.T) {
			const lease = time.Second
			there := startReplica(t, url, lease)
			for range 3 {
				there.send(t, "killed", increment)
				require.False(t, there.result(t).IsError)
			}
			there.send(t, "killed", "x += 1000\nwhile True: pass")
			// The replica holds the conversation once its call runs.
			st, err := sessionstore.Open(context.Background(), url, &sessionstore.Options{Key: storeKey, LeaseWait: -1})
			require.NoError(t, err)
			defer st.Close()
			require.Eventually(t, func() bool {
				l, err := st.Lease(context.Background(), "killed", time.Millisecond)
				if err == nil {
					l.Release(context.Background())
				}
				return err != nil
			}, 30*time.Second, 5*time.Millisecond)
			require.NoError(t, there.cmd.Process.Kill())
			there.cmd.Wait()

			here := storeTool(t, url, lease)
			r := here.Call(context.Background(), "killed", args("x"))
			require.False(t, r.IsError, r.Text())
			assert.Equal(t, "3", *r.Value, "the last committed state, without the killed call's")
		})
	}
}

// TestStoreBadConversationName: with a store, a conversation name that is
// a path, holds NUL or is huge is an error result, and nothing runs.
func TestStoreBadConversationName(t *testing.T) {
	tool := storeTool(t, t.TempDir(), 0)
	for _, name := range []string{"../etc", "a/b", "a\x00b", strings.Repeat("c", 10<<10)} {
		r := tool.Call(context.Background(), name, args("print('ran')"))
		assert.True(t, r.IsError)
		assert.ErrorIs(t, r.Err, sessionstore.ErrBadName)
		assert.Empty(t, r.Stdout)
	}
}

// TestStoreOnOutput: with a store, a run's output streams to OnOutput as
// it does in memory.
func TestStoreOnOutput(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), t.TempDir(), nil)
	require.NoError(t, err)
	defer st.Close()
	var mu sync.Mutex
	var got strings.Builder
	tool := newTool(t, &codetool.Options{Store: st, OnOutput: func(conversation, stream, text string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&got, "%s %s %s", conversation, stream, text)
	}})
	r := tool.Call(context.Background(), "out", args("print('hi')"))
	require.False(t, r.IsError, r.Text())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "out stdout hi\n", got.String())
}

// TestStoreFull: a call whose snapshot does not fit in the store (a NATS
// snapshots' bucket at its max bytes) fails with ErrFull and commits
// nothing: the next call continues from the state before it.
func TestStoreFull(t *testing.T) {
	url := natstest.Run(t).URL() + "?maxbytes=" + strconv.Itoa(1<<20)
	tool := storeTool(t, url, 0)
	r := tool.Call(context.Background(), "full", args("x = 1; x"))
	require.False(t, r.IsError, r.Text())
	r = tool.Call(context.Background(), "full", args("import os; big = os.urandom(2 << 20); x = 2; x"))
	require.True(t, r.IsError)
	assert.ErrorIs(t, r.Err, sessionstore.ErrFull)
	assert.Contains(t, r.Text(), "the store is full")
	t.Logf("%s", r.Text())
	r = tool.Call(context.Background(), "full", args("x, 'big' in globals()"))
	require.False(t, r.IsError, r.Text())
	assert.Equal(t, "(1, False)", *r.Value)
}
