package sandbox_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// TestOutcomeModel runs one table through Guest.Run, Sandbox.Run and
// Session.Run: the same code ends the same way in each, a Python exception
// as the same *Exception (the error and Result.Exception, with ExitCode 1
// and the traceback on stderr too), SystemExit as an *ExitError.
func TestOutcomeModel(t *testing.T) {
	ctx := context.Background()
	py := sandboxtest.Python(t)
	sb, err := py.NewSandbox(nil)
	require.NoError(t, err)
	defer sb.Close()
	sess := newSession(t, nil)
	runs := []struct {
		name string
		run  func(code string) (*sandbox.Result, error)
	}{
		{"Guest.Run", func(code string) (*sandbox.Result, error) { return py.Run(ctx, code, nil) }},
		{"Sandbox.Run", func(code string) (*sandbox.Result, error) { return sb.Run(ctx, code, nil) }},
		{"Session.Run", func(code string) (*sandbox.Result, error) { return sess.Run(ctx, code, nil) }},
	}
	// A session names each run's code "<run-N>", a one-shot run "<string>".
	runName := regexp.MustCompile(`<run-[0-9]+>`)
	for _, tc := range []struct {
		name          string
		code          string
		typ, message  string // the exception; "" for none
		exit          int
		line          string // a line of the traceback
		systemExitErr bool
	}{
		{name: "zero division", code: "x = 1\n1/0", typ: "ZeroDivisionError", message: "division by zero", exit: 1, line: "    1/0\n"},
		{name: "key error", code: "print('before')\n{}['missing']", typ: "KeyError", message: "'missing'", exit: 1, line: "    {}['missing']\n"},
		{name: "module-qualified", code: "import json\njson.loads('{')", typ: "json.decoder.JSONDecodeError",
			message: "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)", exit: 1, line: "    json.loads('{')\n"},
		{name: "the code's own class", code: "class Bad(Exception): pass\ndef f():\n    raise Bad('é' * 3)\nf()", typ: "Bad", message: "ééé", exit: 1, line: "in f\n"},
		{name: "no message", code: "raise KeyboardInterrupt", typ: "KeyboardInterrupt", exit: 1, line: "    raise KeyboardInterrupt\n"},
		{name: "chained", code: "try:\n    1/0\nexcept Exception as e:\n    raise ValueError('again') from e", typ: "ValueError", message: "again", exit: 1,
			line: "The above exception was the direct cause of the following exception:"},
		{name: "SystemExit", code: "import sys\nsys.exit(3)", exit: 3, systemExitErr: true},
		{name: "SystemExit with text", code: "raise SystemExit('bye')", exit: 1, systemExitErr: true},
		{name: "success", code: "print('ok')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tracebacks []string
			for _, r := range runs {
				res, err := r.run(tc.code)
				require.NotNil(t, res, "%s: %v", r.name, err)
				assert.Equal(t, sandbox.StopExit, res.Stop, r.name)
				assert.False(t, res.Stop.Limit(), r.name)
				assert.Equal(t, tc.exit, res.ExitCode, r.name)
				var exc *sandbox.Exception
				var exit *sandbox.ExitError
				switch {
				case tc.typ != "":
					require.ErrorAs(t, err, &exc, r.name)
					assert.NotErrorAs(t, err, &exit, r.name)
					assert.Same(t, exc, res.Exception, r.name)
					assert.Equal(t, tc.typ, exc.Type, r.name)
					assert.Equal(t, tc.message, exc.Message, r.name)
					assert.False(t, exc.Truncated, r.name)
					last := tc.typ
					if tc.message != "" {
						last += ": " + tc.message
					}
					assert.True(t, strings.HasPrefix(exc.Traceback, "Traceback (most recent call last):\n"), "%s: %s", r.name, exc.Traceback)
					assert.True(t, strings.HasSuffix(exc.Traceback, "\n"+last+"\n"), "%s: %s", r.name, exc.Traceback)
					assert.Contains(t, exc.Traceback, tc.line, r.name)
					assert.NotContains(t, exc.Traceback, "fumehood", r.name)
					assert.Contains(t, string(res.Stderr), exc.Traceback, "%s: the traceback is on stderr as python prints it", r.name)
					tracebacks = append(tracebacks, runName.ReplaceAllString(exc.Traceback, "<string>"))
				case tc.systemExitErr:
					require.ErrorAs(t, err, &exit, r.name)
					assert.Equal(t, tc.exit, exit.Code, r.name)
					assert.NotErrorAs(t, err, &exc, r.name)
					assert.Nil(t, res.Exception, r.name)
				default:
					require.NoError(t, err, r.name)
					assert.Nil(t, res.Exception, r.name)
				}
			}
			for i := 1; i < len(tracebacks); i++ {
				assert.Equal(t, tracebacks[0], tracebacks[i], "%s and %s", runs[0].name, runs[i].name)
			}
		})
	}
}

// TestOutcomeModelCapsTexts: a one-shot run's exception texts are cut to
// MaxOutput bytes, as a session's are.
func TestOutcomeModelCapsTexts(t *testing.T) {
	res, err := sandboxtest.Python(t).Run(context.Background(), "raise ValueError('x' * 5000)", &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: 100}})
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "ValueError", exc.Type)
	assert.Equal(t, strings.Repeat("x", 100), exc.Message)
	assert.LessOrEqual(t, len(exc.Traceback), 100)
	assert.True(t, exc.Truncated)
	assert.Equal(t, 1, res.ExitCode)
}

// TestOneShotControlDirectoryCannotBeJammed is the one-shot twin of
// TestSessionControlDirectoryCannotBeJammed, and more: a one-shot Python
// sandbox's control directory is fumehood's (no Mount there), what the
// guest's code puts there is gone by the next run, and an outcome the code
// forges cannot change Result.Stop or the exit code.
func TestOneShotControlDirectoryCannotBeJammed(t *testing.T) {
	ctx := context.Background()
	py := sandboxtest.Python(t)
	for _, p := range []string{sandbox.ControlPath, sandbox.ControlPath + "/x"} {
		_, err := py.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: p, FS: afero.NewMemMapFs()}}})
		require.Error(t, err, p)
		assert.Contains(t, err.Error(), "reserved", p)
	}

	sb, err := py.NewSandbox(nil)
	require.NoError(t, err)
	defer sb.Close()
	// Fill the control directory up to its quota of files, then raise: the
	// runner cannot report, and the run is what its exit status says.
	jam := "import os\nfor i in range(100):\n    try: open('/.fumehood/junk%d' % i, 'w').close()\n    except OSError: break\nprint(len(os.listdir('/.fumehood')))\n"
	res, err := sb.Run(ctx, jam+"1/0", nil)
	require.NotNil(t, res)
	assert.Equal(t, "16\n", string(res.Stdout), "the jam filled the quota")
	if sandboxtest.Guest(t) == sandbox.GuestBuilt {
		// The driver reports through memory: a full directory is no
		// obstacle.
		require.ErrorAs(t, err, new(*sandbox.Exception))
	} else {
		var exit *sandbox.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 1, exit.Code)
	}
	assert.Equal(t, 1, res.ExitCode)
	assert.Equal(t, sandbox.StopExit, res.Stop)
	assert.Contains(t, string(res.Stderr), "ZeroDivisionError: division by zero")
	// The next run of the sandbox reports again. (A run from _start finds
	// the start-up code's lazy sources there, which the host writes for it.)
	res, err = sb.Run(ctx, "import os\nprint([n for n in os.listdir('/.fumehood') if n != 'lazy'])\n1/0", nil)
	require.NotNil(t, res)
	assert.Equal(t, "[]\n", string(res.Stdout), "the directory is emptied after each run")
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "ZeroDivisionError", exc.Type)
	// Nor does a jam left by the interpreter run with Exec.
	res, err = sb.Exec(ctx, nil, "-c", jam)
	require.NoError(t, err)
	assert.Equal(t, "16\n", string(res.Stdout))
	_, err = sb.Run(ctx, "1/0", nil)
	require.ErrorAs(t, err, &exc)

	if sandboxtest.Guest(t) == sandbox.GuestBuilt {
		forgeDriverOutcome(t, sb)
		return
	}
	var exit *sandbox.ExitError
	// The code finds its run's outcome path in the runner's frame and
	// writes an outcome there.
	forge := `import sys
p = sys._getframe(1).f_locals["result"]
print(p.startswith("/.fumehood/result-"))
for ext, text in ((".type", "Forged"), (".message", "by the guest"), (".traceback", "none")):
    open(p + ext, "w").write(text)
open(p, "w").write('{"value": false, "exception": true, "exit": null}')
`
	runForged(t, sb, forge, forgedCase{"exit 0", "", nil, sandbox.StopExit, 0, nil})
	// Exiting with status 1 after forging is raising an exception, which
	// the code may do anyway: the forged exception is reported, as what
	// the guest said, and the exit stays the guest's own.
	res, err = sb.Run(ctx, forge+"import os\nos._exit(1)", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "Forged", exc.Type)
	assert.Equal(t, sandbox.StopExit, res.Stop)
	assert.Equal(t, 1, res.ExitCode)
	// A corrupt outcome is no outcome.
	res, err = sb.Run(ctx, forge+"open(p, 'w').write('{')\nimport os\nos._exit(1)", nil)
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.Code)
	assert.Nil(t, res.Exception)
	// An exception raised after forging overwrites the forgery.
	_, err = sb.Run(ctx, forge+"raise KeyError('real')", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "KeyError", exc.Type)
	assert.Equal(t, "'real'", exc.Message)
}

// forgeDriverOutcome is the forgery of TestOneShotControlDirectoryCannotBeJammed
// on a guest with the driver, whose outcome goes through memory: the code
// fills the driver's outcome with an exception of its own. Only a run the
// driver returned from reports it, as the code raising one would; a limit
// or an exit of the guest's is what the host recorded.
func forgeDriverOutcome(t *testing.T, sb *sandbox.Sandbox) {
	ctx := context.Background()
	forge := `import sys
out = sys._getframe(1).f_locals["out"]
print(isinstance(out, dict))
out.update(type="Forged", message="by the guest", traceback="none")
`
	runForged(t, sb, forge, forgedCase{"exit 1", "import os\nos._exit(1)", nil, sandbox.StopExit, 1, &sandbox.ExitError{Code: 1}})
	// A run the driver returned from reports what the code left there,
	// as raising would.
	res, err := sb.Run(ctx, forge, nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "Forged", exc.Type)
	assert.Equal(t, sandbox.StopExit, res.Stop)
	assert.Equal(t, 1, res.ExitCode)
	// An exception raised after forging overwrites the forgery.
	_, err = sb.Run(ctx, forge+"raise KeyError('real')", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "KeyError", exc.Type)
	assert.Equal(t, "'real'", exc.Message)
}

// forgedCase is a run of code after a forged outcome, and what it must
// end with whatever the forgery says.
type forgedCase struct {
	name string
	code string // after the forgery
	cfg  *sandbox.RunOptions
	stop sandbox.StopReason
	exit int
	want error // matched with errors.Is, or errors.As for an *ExitError; nil: no error
}

// runForged runs the forgery followed by each case's code in sb, the
// limits and exits every guest has and more: none may report the forged
// exception, and each ends as the host recorded.
func runForged(t *testing.T, sb *sandbox.Sandbox, forge string, more ...forgedCase) {
	cases := append([]forgedCase{
		{"fuel", "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 500_000_000}}, sandbox.StopFuel, -1, sandbox.ErrFuelExhausted},
		{"output", "while True: print('spam')", &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: 1000}, StopAtOutputLimit: true}, sandbox.StopOutput, -1, sandbox.ErrOutputLimit},
		{"exit 2", "import os\nos._exit(2)", nil, sandbox.StopExit, 2, &sandbox.ExitError{Code: 2}},
	}, more...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := sb.Run(context.Background(), forge+tc.code, tc.cfg)
			require.NotNil(t, res, "%v", err)
			assert.True(t, strings.HasPrefix(string(res.Stdout), "True\n"), "the code found the outcome: %q %s", res.Stdout, res.Stderr)
			assert.Equal(t, tc.stop, res.Stop, "%v", err)
			assert.Equal(t, tc.exit, res.ExitCode)
			assert.Nil(t, res.Exception)
			assert.NotErrorAs(t, err, new(*sandbox.Exception))
			switch want := tc.want.(type) {
			case nil:
				require.NoError(t, err)
			case *sandbox.ExitError:
				var exit *sandbox.ExitError
				require.ErrorAs(t, err, &exit)
				assert.Equal(t, want.Code, exit.Code)
			default:
				require.ErrorIs(t, err, want)
			}
		})
	}
}

// TestExecHasNoControlDirectory: a WASI program that is not the Python
// guest gets no control mount.
func TestExecHasNoControlDirectory(t *testing.T) {
	g := goGuest(t)
	res, err := g.Exec(context.Background(), nil, "ls", sandbox.ControlPath)
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit, "stdout: %s", res.Stdout)
	assert.Contains(t, string(res.Stderr), "No such file")
	// The path is not reserved: a mount there is the program's own.
	fsys := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(fsys, "/mine", nil, 0o644))
	sb, err := g.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: sandbox.ControlPath, FS: fsys}}})
	require.NoError(t, err)
	defer sb.Close()
	res, err = sb.Exec(context.Background(), nil, "ls", sandbox.ControlPath)
	require.NoError(t, err)
	assert.Equal(t, "mine\n", string(res.Stdout))
}

// TestStopReasonLimit: the limits of a run are fuel, deadline, memory,
// output and stack; the guest's own exit or trap, a cancel and fumehood's
// failure are not.
func TestStopReasonLimit(t *testing.T) {
	limits := map[sandbox.StopReason]bool{sandbox.StopFuel: true, sandbox.StopDeadline: true,
		sandbox.StopMemory: true, sandbox.StopOutput: true, sandbox.StopStack: true}
	for s := sandbox.StopExit; s <= sandbox.StopStack+1; s++ {
		assert.Equal(t, limits[s], s.Limit(), s.String())
	}
}

// TestOutcomeModelHugeException: an exception whose message is far past
// MaxOutput is reported, cut, and the run is still the guest's own exit.
func TestOutcomeModelHugeException(t *testing.T) {
	for _, code := range []string{
		"raise Exception('x' * 30_000_000)",
		"raise type('E' * 30_000, (Exception,), {})('é' * 15_000_000)",
	} {
		res, err := sandboxtest.Python(t).Run(context.Background(), code, nil)
		require.NotNil(t, res, "%v", err)
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc, code)
		assert.Equal(t, sandbox.StopExit, res.Stop, code)
		assert.Equal(t, 1, res.ExitCode, code)
		assert.True(t, exc.Truncated, code)
		assert.LessOrEqual(t, len(exc.Message), sandbox.DefaultMaxOutput, code)
		assert.LessOrEqual(t, len(exc.Traceback), sandbox.DefaultMaxOutput, code)
		assert.True(t, strings.HasPrefix(exc.Traceback, "Traceback (most recent call last):\n"), code)
		t.Logf("%s: peak memory %d MiB, fuel %d", code[:20], res.PeakMemory>>20, res.FuelUsed)
	}
}
