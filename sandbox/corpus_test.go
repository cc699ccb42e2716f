package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// snippet is one entry of testdata/corpus/snippets.txt.
type snippet struct {
	name, category string
	expect         string // "pass", "refuse" or "xfail"
	reason         string // why an xfail snippet fails
	runs           []string
	output         string // pass, xfail: the exact stdout
	errText        string // refuse: text the stderr holds
}

// loadCorpus parses the corpus file (its format is described at its top).
func loadCorpus(t *testing.T) []snippet {
	t.Helper()
	f, err := os.Open("testdata/corpus/snippets.txt")
	require.NoError(t, err)
	defer f.Close()
	var out []snippet
	var cur *snippet
	var body []string
	section := ""
	flush := func() {
		if cur == nil {
			return
		}
		text := strings.TrimRight(strings.Join(body, "\n"), " \n")
		switch section {
		case "code":
			cur.runs = append(cur.runs, text+"\n")
		case "output":
			cur.output = text
		case "error":
			cur.errText = text
		}
		body = nil
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "=== "):
			flush()
			if cur != nil {
				out = append(out, *cur)
			}
			head, reason, _ := strings.Cut(strings.TrimPrefix(line, "=== "), ":")
			fields := strings.Fields(head)
			require.GreaterOrEqual(t, len(fields), 2, "corpus header %q", line)
			cur = &snippet{name: fields[0], category: fields[1], expect: "pass", reason: strings.TrimSpace(reason)}
			if len(fields) > 2 {
				cur.expect = fields[2]
			}
			if fields[1] == "refuse" {
				cur.expect = "refuse"
			}
			require.Contains(t, []string{"pass", "refuse", "xfail"}, cur.expect, "corpus header %q", line)
			section = "code"
		case cur == nil:
		case line == "--- run":
			flush()
		case line == "--- output":
			flush()
			section = "output"
		case line == "--- error":
			flush()
			section = "error"
		default:
			body = append(body, line)
		}
	}
	require.NoError(t, sc.Err())
	flush()
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// corpusOutcome is what one snippet did in one kind of run.
type corpusOutcome struct {
	ok     bool   // did what it is expected to do (for xfail: passed)
	detail string // why not
}

// runSnippet runs sn one-shot (each run in a fresh interpreter, which only
// a session snippet would notice) or in a fresh session, and checks it.
func runSnippet(ctx context.Context, t *testing.T, sn snippet, session bool) corpusOutcome {
	cfg := &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 60 * time.Second}}
	var stdout, stderr strings.Builder
	var runErr error
	if session {
		s, err := sandboxtest.Python(t).NewSession(ctx, &sandbox.Config{Limits: cfg.Limits})
		require.NoError(t, err)
		defer s.Close()
		for _, code := range sn.runs {
			res, err := s.Run(ctx, code, cfg)
			require.NotNil(t, res, "%v", err)
			stdout.Write(res.Stdout)
			stderr.Write(res.Stderr)
			if err != nil {
				runErr = err
				break
			}
		}
	} else {
		res, err := sandboxtest.Python(t).Run(ctx, strings.Join(sn.runs, ""), cfg)
		require.NotNil(t, res, "%v", err)
		stdout.Write(res.Stdout)
		stderr.Write(res.Stderr)
		runErr = err
	}
	if sn.expect == "refuse" {
		var exit *sandbox.ExitError
		var exc *sandbox.Exception
		switch {
		case runErr == nil:
			return corpusOutcome{detail: "ran without error; stdout " + stdout.String()}
		case !errors.As(runErr, &exit) && !errors.As(runErr, &exc):
			return corpusOutcome{detail: "failed, but not as a Python error: " + runErr.Error()}
		case !strings.Contains(stderr.String(), sn.errText):
			return corpusOutcome{detail: "stderr lacks " + sn.errText + ": " + stderr.String()}
		}
		return corpusOutcome{ok: true}
	}
	got := strings.TrimRight(stdout.String(), " \n")
	switch {
	case runErr != nil:
		return corpusOutcome{detail: runErr.Error() + "\n" + stderr.String()}
	case got != sn.output:
		return corpusOutcome{detail: "stdout " + got + "\nwant " + sn.output + "\nstderr " + stderr.String()}
	}
	return corpusOutcome{ok: true}
}

// TestCorpus runs agent-style snippets on the real guest, each one-shot and
// in a session, logs the pass rate and requires every snippet marked pass
// to pass and every refusal to be refused as expected. Snippets marked
// xfail are listed with their reason.
func TestCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("the corpus takes a minute")
	}
	corpus := loadCorpus(t)
	require.GreaterOrEqual(t, len(corpus), 80)
	ctx := context.Background()
	sandboxtest.Python(t)
	var mu sync.Mutex
	results := map[string]corpusOutcome{}
	t.Run("snippets", func(t *testing.T) {
		for _, sn := range corpus {
			for _, session := range []bool{false, true} {
				if sn.category == "session" && !session {
					continue
				}
				kind := "run"
				if session {
					kind = "session"
				}
				t.Run(kind+"/"+sn.name, func(t *testing.T) {
					t.Parallel()
					o := runSnippet(ctx, t, sn, session)
					mu.Lock()
					results[kind+"/"+sn.name] = o
					mu.Unlock()
					switch {
					case sn.expect == "xfail" && o.ok:
						t.Logf("expected to fail (%s) but passes: mark it pass", sn.reason)
					case sn.expect != "xfail":
						assert.True(t, o.ok, "%s", o.detail)
					}
				})
			}
		}
	})
	var passed, total, refused, refusals int
	var xfails []string
	for _, sn := range corpus {
		for _, kind := range []string{"run", "session"} {
			o, ok := results[kind+"/"+sn.name]
			if !ok {
				continue
			}
			if sn.expect == "refuse" {
				refusals++
				if o.ok {
					refused++
				}
				continue
			}
			total++
			if o.ok {
				passed++
			} else if sn.expect == "xfail" {
				xfails = append(xfails, kind+"/"+sn.name+": "+sn.reason)
			}
		}
	}
	sort.Strings(xfails)
	t.Logf("corpus: %d snippets; %d of %d runs not meant to be refused pass (%.1f%%); %d of %d refusals refused as expected",
		len(corpus), passed, total, 100*float64(passed)/float64(max(total, 1)), refused, refusals)
	for _, x := range xfails {
		t.Logf("expected failure: %s", x)
	}
}
