package cpython

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// This file holds what the optional parts (Options.With) add to Build,
// called from a few hooks in build.go: their inputs, tools, steps, key and
// the fields of Info they fill.

// knownParts are the optional parts, each with the parts it implies.
var knownParts = map[string][]string{
	Numpy:      nil,
	Pandas:     {Numpy},
	Matplotlib: {Numpy},
}

// partAliases are names that stand for a set of parts: a guest built with
// one is the guest built with its parts (the same key).
var partAliases = map[string][]string{
	Data: {Numpy, Pandas, Matplotlib},
}

// knownPartNames lists the names Options.With takes, for messages.
func knownPartNames() string {
	return fmt.Sprintf("%s, %s, %s, %s (%s)", Numpy, Pandas, Matplotlib, Data, strings.Join(partAliases[Data], " + "))
}

// parts returns o.With checked, with the parts they imply, sorted and
// without duplicates.
func (o *Options) parts() ([]string, error) {
	if o == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []string
	for _, name := range o.With {
		names := []string{name}
		if alias, ok := partAliases[name]; ok {
			names = alias
		}
		for _, p := range names {
			implied, ok := knownParts[p]
			if !ok {
				return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPart, p, knownPartNames())
			}
			for _, q := range append([]string{p}, implied...) {
				if !seen[q] {
					seen[q] = true
					out = append(out, q)
				}
			}
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
	v := struct {
		Base       string
		With       []string
		Inputs     []LocalInput
		Toolchain  []string
		Flags      []string
		AptInputs  []Input  `json:",omitempty"`
		PartsFlags []string `json:",omitempty"`
		CxxRuntime string   `json:",omitempty"`
	}{Key(), parts, partLocalInputs(parts), toolchainIDs(numpyToolchainPins), numpyFlags(), partInputs(parts), partFlags(parts), ""}
	if v.CxxRuntime, err = cxxRuntimeKey(parts); err != nil {
		return "", err
	}
	b, _ := json.Marshal(v)
	return pipeline.Digest(b), nil
}

// partInputs are the inputs apt fetches for the parts beyond Inputs, each
// once.
func partInputs(parts []string) []Input {
	var out []Input
	seen := map[string]bool{}
	for _, list := range [][]Input{partList(parts, Pandas, PandasInputs), partList(parts, Matplotlib, MatplotlibInputs)} {
		for _, in := range list {
			if !seen[in.Package] {
				seen[in.Package] = true
				out = append(out, in)
			}
		}
	}
	return out
}

// partList is list if parts has part, else nil.
func partList[T any](parts []string, part string, list []T) []T {
	if slices.Contains(parts, part) {
		return list
	}
	return nil
}

// partLocalInputs are the inputs the parts need that apt cannot fetch.
func partLocalInputs(parts []string) []LocalInput {
	return append(append([]LocalInput(nil), NumpyInputs...), partList(parts, Matplotlib, MatplotlibLocalInputs)...)
}

// partFlags are the flags of the parts beyond numpy's.
func partFlags(parts []string) []string {
	return append(partList(parts, Pandas, pandasFlags()), partList(parts, Matplotlib, matplotlibFlags())...)
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
	for _, in := range partLocalInputs(parts) {
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
	b.parts = parts
	add := b.numpySteps()
	if slices.Contains(parts, Pandas) {
		add = append(add, b.pandasSteps()...)
	}
	if slices.Contains(parts, Matplotlib) {
		add = append(add, b.matplotlibSteps()...)
	}
	add = append(add, buildStep{"link the extension modules into python.wasm", b.numpyLink})
	var out []buildStep
	for _, s := range steps {
		if s.name == "standard library" {
			out = append(out, add...)
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
	info.LocalInputs = partLocalInputs(parts)
	info.Flags = append(append(info.Flags, numpyFlags()...), partFlags(parts)...)
	info.Inputs = append(append([]Input(nil), info.Inputs...), partInputs(parts)...)
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
