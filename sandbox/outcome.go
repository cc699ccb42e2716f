package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/spf13/afero"

	"github.com/fumehood/fumehood/internal/guests/cpython"
)

// The outcome of a session run is written by the driver, which runs in the
// guest: the guest's code can reach it (its frames, its request, the
// control directory) and make it say anything. So the host trusts nothing
// in it but what it checks: it reads every file of it with a bound and caps
// every text it returns at the run's MaxOutput bytes itself, whatever cap
// the driver applied.
//
// The driver writes, for the request's Result path P:
//
//	P.value      the repr of the code's last value, if there is one
//	P.type       the exception's type, message and traceback, if the
//	P.message    code raised one
//	P.traceback
//	P            the JSON outcome (written last: its presence says the run
//	             is over), saying which of the files above there are
//
// Each text is UTF-8, cut by the driver to at most max_value+1 bytes, so
// that a file longer than MaxOutput means a text that was longer.

// maxOutcomeJSON bounds the JSON outcome file: the driver's is a few dozen
// bytes.
const maxOutcomeJSON = 4 << 10

// errOutcomeTooLarge reports a JSON outcome file past maxOutcomeJSON,
// which only the guest's own code can have written.
var errOutcomeTooLarge = errors.New("the outcome file is too large")

// outcome is the driver's JSON outcome.
type outcome struct {
	// Value says there is a value, in P.value.
	Value bool `json:"value"`
	// Exception says the code raised an exception, in P.type, P.message
	// and P.traceback.
	Exception bool `json:"exception"`
	// Exit is the status of SystemExit, as the host reads it
	// whatever integer the guest wrote.
	Exit *cpython.ExitCode `json:"exit"`
}

// readOutcome reads the outcome of a run from fsys (the control directory)
// at name, capping every text it returns at limit bytes.
func readOutcome(fsys afero.Fs, name string, limit int) (*Result, error) {
	data, truncated, err := readCapped(fsys, name, maxOutcomeJSON)
	if err != nil {
		return nil, err
	}
	if truncated {
		return nil, errOutcomeTooLarge
	}
	var out outcome
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	res := &Result{}
	if out.Value {
		if res.Value, res.ValueTruncated, err = readText(fsys, name+".value", limit); err != nil {
			return nil, err
		}
		res.HasValue = true
	}
	if out.Exception {
		e := &Exception{}
		for _, f := range []struct {
			ext string
			dst *string
		}{{".type", &e.Type}, {".message", &e.Message}, {".traceback", &e.Traceback}} {
			text, cut, err := readText(fsys, name+f.ext, limit)
			if err != nil {
				return nil, err
			}
			*f.dst, e.Truncated = text, e.Truncated || cut
		}
		res.Exception = e
	}
	if out.Exit != nil {
		res.ExitCode = int(*out.Exit)
	}
	return res, nil
}

// readText reads the text in file name, cut to at most limit bytes, and
// reports whether anything was cut.
func readText(fsys afero.Fs, name string, limit int) (string, bool, error) {
	// A few bytes more, to finish a character cut at limit.
	n := limit
	if n <= math.MaxInt-utf8.UTFMax {
		n += utf8.UTFMax - 1
	}
	data, more, err := readCapped(fsys, name, n)
	if err != nil {
		return "", false, err
	}
	text, cut := capText(data, limit)
	return text, more || cut, nil
}

// readCapped reads at most limit bytes of file name and reports whether
// the file holds more. It allocates at most limit bytes, whatever the
// file's size.
func readCapped(fsys afero.Fs, name string, limit int) ([]byte, bool, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if fi.IsDir() {
		return nil, false, fmt.Errorf("%s is a directory", name)
	}
	buf := make([]byte, max(min(fi.Size(), int64(limit)), 0))
	n, err := io.ReadFull(io.LimitReader(f, int64(len(buf))), buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	var one [1]byte
	k, _ := f.Read(one[:])
	return buf[:n], k > 0 || fi.Size() > int64(limit), nil
}

// capText returns data as a string of valid UTF-8 (each invalid byte
// becomes U+FFFD) of at most limit bytes, cut at a character boundary, and
// reports whether it cut anything.
func capText(data []byte, limit int) (string, bool) {
	if len(data) <= limit && utf8.Valid(data) {
		return string(data), false
	}
	var b strings.Builder
	b.Grow(min(len(data), limit))
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		n := size
		if r == utf8.RuneError && size == 1 {
			n = utf8.RuneLen(utf8.RuneError)
		}
		if b.Len()+n > limit {
			return b.String(), true
		}
		if n != size {
			b.WriteRune(utf8.RuneError)
		} else {
			b.Write(data[:size])
		}
		data = data[size:]
	}
	return b.String(), false
}

// Limit reports whether the reason is a limit of the run's that stopped
// it: StopFuel, StopDeadline, StopMemory, StopOutput or StopStack (the
// guest ran out of stack). The others are the guest's own exit or trap, a
// canceled context and fumehood's own failure.
func (s StopReason) Limit() bool {
	switch s {
	case StopFuel, StopDeadline, StopMemory, StopOutput, StopStack:
		return true
	}
	return false
}
