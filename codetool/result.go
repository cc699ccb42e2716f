package codetool

import (
	"encoding/base64"

	"github.com/fumehood/fumehood/internal/runtool"
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

// Text renders the result for a model: labelled sections for stdout,
// stderr, the value, the exception (with its traceback unless stderr
// already holds it), the limit or error, the files produced, what was cut
// at the output limit, and notes.
// A result with none of them reads "(no output)".
func (r *Result) Text() string {
	files := make([]runtool.File, len(r.Files))
	for i, f := range r.Files {
		files[i] = runtool.File(f)
	}
	return (&runtool.Result{Stdout: r.Stdout, Stderr: r.Stderr, Value: r.Value, Exception: r.Exception,
		StoppedBy: r.StoppedBy, Error: r.Error, Truncated: r.Truncated, Files: files, Notes: r.Notes,
		MaxOutput: r.maxOutput}).Text()
}

// export returns r, runtool's Result, as the package's.
func export(r *runtool.Result) *Result {
	files := make([]File, len(r.Files))
	for i, f := range r.Files {
		files[i] = File(f)
	}
	if r.Files == nil {
		files = nil
	}
	return &Result{Stdout: r.Stdout, Stderr: r.Stderr, Value: r.Value, Exception: r.Exception,
		StoppedBy: r.StoppedBy, Error: r.Error, Truncated: r.Truncated, Files: files, Notes: r.Notes,
		IsError: r.IsError, Err: r.Err, Run: r.Run, maxOutput: r.MaxOutput}
}
