package cpython

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// This file holds what the optional parts (Options.With) add to Build,
// called from a few hooks in build.go: their inputs, tools, steps, key and
// the fields of Info they fill.

// parts returns o.With checked, sorted and without duplicates.
func (o *Options) parts() ([]string, error) {
	if o == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range o.With {
		if p != Numpy {
			return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPart, p, Numpy)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// key is Key() for the default guest and a digest of Key() and the parts'
// recipe, inputs and flags for a variant.
func (o *Options) key() (string, error) {
	parts, err := o.parts()
	if err != nil || len(parts) == 0 {
		return Key(), err
	}
	b, _ := json.Marshal(struct {
		Base      string
		With      []string
		Inputs    []LocalInput
		Toolchain []string
		Flags     []string
	}{Key(), parts, NumpyInputs, toolchainIDs(numpyToolchainPins), numpyFlags()})
	return pipeline.Digest(b), nil
}

// partTools are the tools the parts need beyond Tools.
func partTools(parts []string) []Tool {
	if len(parts) == 0 {
		return nil
	}
	return NumpyTools
}

// localInputs finds and verifies the parts' inputs, adding their paths to
// files by Name. A file given in opts.Sources is copied into the sources
// directory once verified, so that later builds find it.
func localInputs(d dirs, opts *Options, parts []string, files map[string]string) error {
	if len(parts) == 0 {
		return nil
	}
	for _, in := range NumpyInputs {
		cached := filepath.Join(d.sources, in.File)
		given := opts.Sources[in.Name]
		if given == "" {
			if err := verifyFile(cached, Input{Package: in.Name, File: in.File, SHA256: in.SHA256}); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("%w: %s (%s) is not in %s: give its path (--%s-source)", ErrMissingInput, in.File, in.Upstream, d.sources, in.Name)
				}
				return err
			}
			files[in.Name] = cached
			continue
		}
		if err := verifyFile(given, Input{Package: in.Name, File: given, SHA256: in.SHA256}); err != nil {
			return err
		}
		files[in.Name] = given
		if err := os.MkdirAll(d.sources, 0o755); err == nil {
			if data, err := os.ReadFile(given); err == nil {
				_ = writeAtomic(cached, data)
			}
		}
	}
	return nil
}

// ErrMissingInput reports that an input the build cannot fetch was not
// given.
var ErrMissingInput = errors.New("cpython: input missing")

// withParts inserts the parts' steps before the standard library is
// packed (they add to the tree that step packs).
func (b *builder) withParts(steps []buildStep, parts []string) []buildStep {
	if len(parts) == 0 {
		return steps
	}
	var out []buildStep
	for _, s := range steps {
		if s.name == "standard library" {
			out = append(out, b.numpySteps()...)
		}
		out = append(out, s)
	}
	return out
}

// describeParts fills the variant's fields of info.
func (b *builder) describeParts(info *Info, opts *Options) error {
	parts, err := opts.parts()
	if err != nil || len(parts) == 0 {
		return err
	}
	if info.Key, err = opts.key(); err != nil {
		return err
	}
	info.With = parts
	info.LocalInputs = NumpyInputs
	info.Flags = append(info.Flags, numpyFlags()...)
	mods, err := b.numpyModules()
	if err != nil {
		return err
	}
	for _, m := range mods {
		info.Builtins = append(info.Builtins, m.name)
	}
	return nil
}

// notBuilt is ErrNotBuilt, naming the variant's build command.
func notBuilt(opts *Options) error {
	parts, _ := opts.parts()
	if len(parts) == 0 {
		return ErrNotBuilt
	}
	return fmt.Errorf("%w (this variant: `%s --with %s`)", ErrNotBuilt, BuildCommand, strings.Join(parts, ","))
}
