package wasi_test

import (
	"fmt"
	"io"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

// TestFSListingBudget is the directory listing attack: many handles on a
// large directory, each read once so that it holds a listing. With
// MaxListingBytes, the listings held never exceed the bound, the one past
// it fails with ENOMEM, and closing or rewinding releases the memory.
func TestFSListingBudget(t *testing.T) {
	const entries, handles = 900, 1000
	backing := afero.NewMemMapFs()
	for i := range entries {
		require.NoError(t, afero.WriteFile(backing, fmt.Sprintf("/d/f%03d", i), nil, 0o644))
	}
	perListing := int64(entries * (wasi.ListingEntryBytes + len("f000")))

	// Without a bound, 1,000 handles hold 1,000 listings.
	fsys, err := wasi.NewFS(backing, wasi.Options{})
	require.NoError(t, err)
	var files []sys.File
	for range handles {
		d, errno := fsys.OpenFile("d", sys.O_RDONLY|sys.O_DIRECTORY, 0)
		require.Equal(t, sys.Errno(0), errno)
		_, errno = d.Readdir(1)
		require.Equal(t, sys.Errno(0), errno)
		files = append(files, d)
	}
	require.Equal(t, handles*perListing, fsys.ListingBytes())
	for _, d := range files {
		require.Equal(t, sys.Errno(0), d.Close())
	}
	require.Zero(t, fsys.ListingBytes())

	// With a bound of ten listings and a bit.
	budget := 10*perListing + perListing/2
	var reported []uint16
	fsys, err = wasi.NewFS(backing, wasi.Options{MaxListingBytes: budget,
		ReportErrno: func(e uint16) { reported = append(reported, e) }})
	require.NoError(t, err)
	files = files[:0]
	listed, failed := 0, 0
	for range handles {
		d, errno := fsys.OpenFile("d", sys.O_RDONLY|sys.O_DIRECTORY, 0)
		require.Equal(t, sys.Errno(0), errno, "opening is not listing")
		files = append(files, d)
		switch _, errno = d.Readdir(1); errno {
		case 0:
			listed++
		case wasi.ENOMEM:
			failed++
		default:
			t.Fatalf("readdir: %v", errno)
		}
		require.LessOrEqual(t, fsys.ListingBytes(), budget)
	}
	require.Equal(t, 10, listed)
	require.Equal(t, handles-10, failed)
	require.Equal(t, 10*perListing, fsys.ListingBytes())
	require.Len(t, reported, failed)
	require.Equal(t, uint16(48), reported[0], "wasip1 ENOMEM")

	// A failed handle can list once another handle is closed.
	require.Equal(t, sys.Errno(0), files[0].Close())
	require.Equal(t, 9*perListing, fsys.ListingBytes())
	dirents, errno := files[len(files)-1].Readdir(-1)
	require.Equal(t, sys.Errno(0), errno)
	require.Len(t, dirents, entries)
	require.Equal(t, 10*perListing, fsys.ListingBytes())

	// A rewind releases the listing until the next read.
	_, errno = files[1].Seek(0, io.SeekStart)
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, 9*perListing, fsys.ListingBytes())
	dirents, errno = files[1].Readdir(-1)
	require.Equal(t, sys.Errno(0), errno)
	require.Len(t, dirents, entries)
	require.Equal(t, 10*perListing, fsys.ListingBytes())

	for _, d := range files {
		require.Equal(t, sys.Errno(0), d.Close())
		require.Equal(t, sys.Errno(0), d.Close(), "closing twice releases once")
	}
	require.Zero(t, fsys.ListingBytes())
	all, _ := fsys.Handles()
	require.Zero(t, all)

	_, err = wasi.NewFS(backing, wasi.Options{MaxListingBytes: -1})
	require.Error(t, err)
}
