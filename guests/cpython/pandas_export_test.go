package cpython

// ApplyPandasEdits makes pandasSourceEdits in pandas' source tree at dir,
// for the tests that import pandas from that tree.
func ApplyPandasEdits(dir string) error { return applyEdits(dir, "pandas", pandasSourceEdits) }
