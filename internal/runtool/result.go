package runtool

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fumehood/fumehood/internal/textcut"
	"github.com/fumehood/fumehood/sandbox"
)

// Result is a run's outcome, for a model: what codetool.Result holds
// (codetool's public type mirrors its fields and doc) and what the MCP
// server's run tools send. Text renders it. Every text is valid UTF-8,
// cut to MaxOutput bytes.
type Result struct {
	// Stdout and Stderr are what the run printed.
	Stdout, Stderr string
	// Value is the repr of the value of the code's last expression, when
	// the code ends in one whose value is not None.
	Value *string
	// Exception is the Python exception the code raised: a copy of the
	// run's, its texts cut to MaxOutput bytes (Truncated says so).
	Exception *sandbox.Exception
	// StoppedBy names the limit that stopped the run, as the host
	// recorded it (sandbox.Result.Stop, when Stop.Limit()); empty when
	// none did.
	StoppedBy string
	// Error says what went wrong when it was not the code's exception.
	Error string
	// Truncated names the texts that were cut to the limit: "stdout",
	// "stderr", "value", "exception", "error", "files".
	Truncated []string
	// Files are the files the run created or changed, in path order
	// (Watch.Changed).
	Files []File
	// Notes tell the model something it should know about the call.
	Notes []string
	// IsError marks a result the model should read as a failure.
	IsError bool
	// Err is the error behind IsError, for the caller.
	Err error
	// Run is the sandbox's result, nil when the code did not run.
	Run *sandbox.Result
	// MaxOutput is the limit texts were cut at, for Text; 0 if unknown.
	MaxOutput int
}

// File is a file a run created or changed: codetool.File, whose public
// type has the same fields.
type File struct {
	// Path is the file's absolute path in the sandbox.
	Path string `json:"path"`
	// Size is its size in bytes.
	Size int64 `json:"size"`
	// MediaType is "image/png", "image/jpeg" or "image/svg+xml" for an
	// image, else empty.
	MediaType string `json:"media_type,omitempty"`
	// Data is an image's content, nil for other files and for images past
	// the watch's size.
	Data []byte `json:"data,omitempty"`
}

// IsRaster reports whether f is a PNG or JPEG image with its Data: what
// model APIs accept as an image block. An SVG is text.
func (f File) IsRaster() bool {
	return f.Data != nil && (f.MediaType == "image/png" || f.MediaType == "image/jpeg")
}

// FromRun turns a session run's outcome (sandbox.Session.Run's) into a
// Result, each text cut to maxOutput bytes whatever the sandbox kept. A
// Python exception, a limit and any other error set IsError; res may be
// nil when the run failed before it began.
func FromRun(res *sandbox.Result, err error, maxOutput int) *Result {
	r := &Result{Run: res, Err: err, IsError: err != nil, MaxOutput: maxOutput}
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
		r.Cut("stdout")
	}
	if res.StderrTruncated {
		r.Cut("stderr")
	}
	if res.HasValue {
		v := r.clip("value", res.Value, maxOutput)
		r.Value = &v
		if res.ValueTruncated {
			r.Cut("value")
		}
	}
	if e := res.Exception; e != nil {
		r.Exception = &sandbox.Exception{Type: r.clip("exception", e.Type, maxOutput),
			Message: r.clip("exception", e.Message, maxOutput), Traceback: r.clip("exception", e.Traceback, maxOutput)}
		if e.Truncated {
			r.Cut("exception")
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
	t, c := textcut.Cut(text, n)
	if c {
		r.Cut(what)
	}
	return t
}

// Cut records that the text named what was truncated.
func (r *Result) Cut(what string) {
	if !slices.Contains(r.Truncated, what) {
		r.Truncated = append(r.Truncated, what)
	}
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
		if r.MaxOutput > 0 {
			limit = fmt.Sprintf(" of %d bytes", r.MaxOutput)
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
