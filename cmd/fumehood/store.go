package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sessionstore"
	_ "github.com/fumehood/fumehood/sessionstore/natsstore" // nats:// stores
)

// storeKeyEnv names the variable that holds a store's operator key.
const storeKeyEnv = "FUMEHOOD_STORE_KEY"

// openStore opens the store at url, with the key in $FUMEHOOD_STORE_KEY
// if it is set.
func openStore(ctx context.Context, url string) (sessionstore.Store, error) {
	var o sessionstore.Options
	if k := os.Getenv(storeKeyEnv); k != "" {
		o.Key = []byte(k)
	}
	st, err := sessionstore.Open(ctx, url, &o)
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	return st, nil
}

// runStored runs src in the named session of a store and commits it: the
// session is created on its first use, and the run's state is kept even
// when the code raised, as with --snapshot.
func (c *common) runStored(ctx context.Context, py *sandbox.Guest, lim sandbox.Limits, url, name, src string,
	cfg *sandbox.RunOptions, stdout io.Writer) (*sandbox.Result, error) {
	if err := sessionstore.CheckName(name); err != nil {
		return nil, &usageError{err.Error()}
	}
	st, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	runs := sessionstore.NewSessions(st, py, &sessionstore.SessionsOptions{Config: c.sandboxConfig(lim), MaxLive: -1})
	defer runs.Close()
	var res *sandbox.Result
	var runErr error
	err = runs.Do(ctx, name, func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		if err := c.copyFiles(s.Files()); err != nil { // --file, before every run
			return err
		}
		res, runErr = s.Run(ctx, src, cfg)
		if res != nil && res.HasValue {
			fmt.Fprintln(stdout, res.Value)
		}
		if errors.Is(runErr, sandbox.ErrClosed) {
			return runErr // nothing to commit
		}
		return nil
	})
	if err != nil {
		if res == nil {
			return nil, fmt.Errorf("session %q: %w", name, err)
		}
		return res, fmt.Errorf("session %q was not saved: %w", name, err)
	}
	return res, runErr
}
