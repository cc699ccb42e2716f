package sessionstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fumehood/fumehood/sessionstore"
)

// A head moves by compare-and-swap: a commit on a head that moved since
// it was loaded is a conflict, and a lease keeps other callers out.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sessions")
	defer os.RemoveAll(dir)
	st, err := sessionstore.Open(ctx, dir, &sessionstore.Options{Key: []byte("a key of 16 bytes or more"), LeaseWait: -1})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	lease, _ := st.Lease(ctx, "conv-1", 30*time.Second)
	_, err = st.Lease(ctx, "conv-1", 30*time.Second)
	fmt.Println(errors.Is(err, sessionstore.ErrBusy))

	ref, _ := st.Put(ctx, "conv-1", []byte("snapshot bytes"))
	first, _ := st.Commit(ctx, "conv-1", sessionstore.Head{}, ref)
	ref2, _ := st.Put(ctx, "conv-1", []byte("next snapshot"))
	_, err = st.Commit(ctx, "conv-1", first, ref2)
	fmt.Println(err)
	_, err = st.Commit(ctx, "conv-1", first, ref2)
	fmt.Println(errors.Is(err, sessionstore.ErrConflict))
	lease.Release(ctx)

	head, _ := st.Load(ctx, "conv-1")
	data, _ := st.Get(ctx, "conv-1", head.Ref)
	fmt.Printf("%s, %d bytes\n", data, head.Size)
	// Output:
	// true
	// <nil>
	// true
	// next snapshot, 13 bytes
}
