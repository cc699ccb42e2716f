package cpython

import "context"

// FetchInputs returns the path of every input in list, verified, fetching
// the missing ones into the cache's sources directory as the guest's build
// does (see fetchInputs). It serves recipes kept outside this package that
// use the same pinned toolchain, such as internal/cxxrt.
func FetchInputs(ctx context.Context, opts *Options, list []Input) (map[string]string, error) {
	if opts == nil {
		opts = &Options{}
	}
	d, err := opts.dirs()
	if err != nil {
		return nil, err
	}
	return fetchInputs(ctx, d, opts, list)
}
