package codetool

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fumehood/fumehood/sandbox"
)

// Result is a tool call's outcome, for the model. Text renders it as the
// text a model reads best; it also marshals to JSON (a File's Data as
// base64). Every text is valid UTF-8, cut to the tool's MaxOutput bytes.
type Result struct {
	// Stdout and Stderr are what the run printed.
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Value is the repr of the value of the code's last expression, when
	// the code ends in one whose value is not None.
	Value *string `json:"value,omitempty"`
	// Exception is the Python exception the code raised: a copy of the
	// run's, its texts cut to the tool's MaxOutput bytes (Truncated says
	// so).
	Exception *sandbox.Exception `json:"exception,omitempty"`
	// StoppedBy names the limit that stopped the run, as the host
	// recorded it (sandbox.Result.Stop, when Stop.Limit()), never as the
	// guest's exit status or output might suggest: "deadline", "fuel",
	// "memory", "output" or "stack" (the guest ran out of stack); empty
	// when none did.
	StoppedBy string `json:"stopped_by,omitempty"`
	// Error says what went wrong when it was not the code's exception: bad
	// arguments, a limit, a failure of the host.
	Error string `json:"error,omitempty"`
	// Truncated names the texts that were cut to the limit: "stdout",
	// "stderr", "value", "exception", "error", "files".
	Truncated []string `json:"truncated,omitempty"`
	// Files are the files the run created or changed under the output
	// directory, in path order.
	Files []File `json:"files,omitempty"`
	// Notes tell the model something it should know about the call, such
	// as a limit it asked for and did not get.
	Notes []string `json:"notes,omitempty"`
	// IsError marks a result the model should read as a failure: an
	// exception, a limit, a non-zero exit, bad arguments.
	IsError bool `json:"is_error,omitempty"`

	// Err is the error behind IsError, for the caller (not the model):
	// errors.Is it against ErrBadArguments, ErrTooManySessions, ErrClosed,
	// sandbox.ErrFuelExhausted, context.DeadlineExceeded…, or errors.As
	// it to a *sandbox.Exception or *sandbox.ExitError.
	Err error `json:"-"`
	// Run is the sandbox's result, nil when the code did not run.
	Run *sandbox.Result `json:"-"`

	maxOutput int // the limit texts were cut at, for Text; 0 if unknown
}

// File is a file a run created or changed.
type File struct {
	// Path is the file's absolute path in the sandbox.
	Path string `json:"path"`
	// Size is its size in bytes.
	Size int64 `json:"size"`
	// MediaType is "image/png", "image/jpeg" or "image/svg+xml" for an
	// image, else empty.
	MediaType string `json:"media_type,omitempty"`
	// Data is an image's content (base64 in JSON), nil for other files
	// and for images past Options.MaxImageBytes.
	Data []byte `json:"data,omitempty"`
}

// Base64 returns Data in standard base64, as image blocks of model APIs
// take it.
func (f File) Base64() string { return base64.StdEncoding.EncodeToString(f.Data) }

// IsRaster reports whether f is a PNG or JPEG image with its Data: what
// model APIs accept as an image block. An SVG is text: send its Data as
// text.
func (f File) IsRaster() bool {
	return f.Data != nil && (f.MediaType == "image/png" || f.MediaType == "image/jpeg")
}

// Images returns the files that carry an image's content (Data set).
func (r *Result) Images() []File {
	var out []File
	for _, f := range r.Files {
		if f.Data != nil {
			out = append(out, f)
		}
	}
	return out
}

// FromRun turns a session run's outcome (sandbox.Session.Run's) into a
// Result, each text cut to maxOutput bytes whatever the sandbox kept. A
// Python exception, a limit and any other error set IsError; res may be
// nil when the run failed before it began.
func FromRun(res *sandbox.Result, err error, maxOutput int) *Result {
	r := &Result{Run: res, Err: err, IsError: err != nil, maxOutput: maxOutput}
	if res == nil {
		if err == nil {
			err = errors.New("no result")
			r.Err, r.IsError = err, true
		}
		r.Error = r.clip("error", err.Error(), maxOutput)
		return r
	}
	r.Stdout = r.clip("stdout", string(res.Stdout), maxOutput)
	r.Stderr = r.clip("stderr", string(res.Stderr), maxOutput)
	if res.StdoutTruncated {
		r.cut("stdout")
	}
	if res.StderrTruncated {
		r.cut("stderr")
	}
	if res.HasValue {
		v := r.clip("value", res.Value, maxOutput)
		r.Value = &v
		if res.ValueTruncated {
			r.cut("value")
		}
	}
	if e := res.Exception; e != nil {
		r.Exception = &sandbox.Exception{Type: r.clip("exception", e.Type, maxOutput),
			Message: r.clip("exception", e.Message, maxOutput), Traceback: r.clip("exception", e.Traceback, maxOutput)}
		if e.Truncated {
			r.cut("exception")
		}
		r.Exception.Truncated = slices.Contains(r.Truncated, "exception")
	}
	if res.Stop.Limit() {
		r.StoppedBy = res.Stop.String()
	}
	var exc *sandbox.Exception
	if err != nil && !errors.As(err, &exc) {
		r.Error = r.clip("error", err.Error(), maxOutput)
	}
	return r
}

// clip cuts text to n bytes of valid UTF-8, recording what it cut.
func (r *Result) clip(what, text string, n int) string {
	t, c := Clip(text, n)
	if c {
		r.cut(what)
	}
	return t
}

// cut records that the text named what was truncated.
func (r *Result) cut(what string) {
	for _, w := range r.Truncated {
		if w == what {
			return
		}
	}
	r.Truncated = append(r.Truncated, what)
}

// Clip returns text as valid UTF-8 (a run of invalid bytes becomes
// U+FFFD) of at most n bytes, cut at a character boundary, and whether it
// cut anything.
func Clip(text string, n int) (string, bool) {
	n = max(n, 0)
	cut := len(text) > n
	if cut {
		text = text[:n+1] // the last byte only tells whether a character ends at n
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) <= n {
		return text, cut
	}
	i := n
	for i > 0 && !utf8.RuneStart(text[i]) {
		i--
	}
	return text[:i], true
}

// Text renders the result for a model: labelled sections for stdout,
// stderr, the value, the exception (with its traceback unless stderr
// already holds it), the limit or error, the files produced, what was cut
// at the output limit, and notes.
// A result with none of them reads "(no output)".
func (r *Result) Text() string {
	var b strings.Builder
	section := func(label, text string) {
		if text == "" {
			return
		}
		fmt.Fprintf(&b, "%s:\n%s", label, text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	section("stdout", r.Stdout)
	section("stderr", r.Stderr)
	if r.Value != nil {
		fmt.Fprintf(&b, "value: %s\n", *r.Value)
	}
	switch {
	case r.Exception != nil:
		fmt.Fprintf(&b, "exception: %s: %s\n", r.Exception.Type, r.Exception.Message)
		if tb := strings.TrimSpace(r.Exception.Traceback); tb != "" && !strings.Contains(r.Stderr, tb) {
			section("traceback", r.Exception.Traceback)
		}
	case r.StoppedBy != "":
		fmt.Fprintf(&b, "stopped: %s limit (%s)\n", r.StoppedBy, r.Error)
	case r.Error != "":
		fmt.Fprintf(&b, "error: %s\n", r.Error)
	}
	if len(r.Files) > 0 {
		b.WriteString("files:\n")
		for _, f := range r.Files {
			fmt.Fprintf(&b, "  %s (%d bytes", f.Path, f.Size)
			switch {
			case f.Data != nil:
				fmt.Fprintf(&b, ", %s, attached", f.MediaType)
			case f.MediaType != "":
				fmt.Fprintf(&b, ", %s, too large to attach", f.MediaType)
			}
			b.WriteString(")\n")
		}
	}
	texts := slices.DeleteFunc(slices.Clone(r.Truncated), func(w string) bool { return w == "files" })
	if len(texts) > 0 {
		limit := ""
		if r.maxOutput > 0 {
			limit = fmt.Sprintf(" of %d bytes", r.maxOutput)
		}
		fmt.Fprintf(&b, "(cut: %s went past the output limit%s, and part of it was dropped; "+
			"print less, or write it to a file under /work and read parts of it)\n", strings.Join(texts, ", "), limit)
	}
	if len(texts) < len(r.Truncated) {
		fmt.Fprintf(&b, "(only the first %d files are listed)\n", maxFiles)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if b.Len() == 0 {
		b.WriteString("(no output)\n")
	}
	return b.String()
}
