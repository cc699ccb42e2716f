package pydriver_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/fuel"
)

// imagePage is the granularity at which images are compared and written
// (sandbox's pageSize).
const imagePage = 4096

// image is an initialized instance's state, as sandbox's base images keep
// it: its memory, and the mutable globals (all but the fuel).
type image struct {
	size    uint32
	mem     []byte
	globals map[string]uint64
	// diff lists the pages that differ from a fresh instance's memory
	// (zeros past its end): all a restore into a fresh instance writes.
	diff []uint32
}

// captureImage copies mod's memory and globals, comparing the memory with
// that of fresh, a new instance of the same module; globals names the
// mutable globals.
func captureImage(t testing.TB, mod, fresh api.Module, globals []string) *image {
	t.Helper()
	size := mod.Memory().Size()
	view, ok := mod.Memory().Read(0, size)
	require.True(t, ok)
	img := &image{size: size, mem: bytes.Clone(view), globals: map[string]uint64{}}
	for _, name := range globals {
		if name != fuel.GlobalName {
			img.globals[name] = mod.ExportedGlobal(name).Get()
		}
	}
	base, ok := fresh.Memory().Read(0, fresh.Memory().Size())
	require.True(t, ok)
	zero := make([]byte, imagePage)
	for i := uint32(0); i < size/imagePage; i++ {
		p := img.mem[i*imagePage : (i+1)*imagePage]
		ref := zero
		if int(i+1)*imagePage <= len(base) {
			ref = base[i*imagePage : (i+1)*imagePage]
		}
		if !bytes.Equal(p, ref) {
			img.diff = append(img.diff, i)
		}
	}
	return img
}

// nonZeroPages counts the image's pages that are not all zeros.
func (img *image) nonZeroPages() int {
	zero := make([]byte, imagePage)
	n := 0
	for i := 0; i+imagePage <= len(img.mem); i += imagePage {
		if !bytes.Equal(img.mem[i:i+imagePage], zero) {
			n++
		}
	}
	return n
}

// restore writes the image into m, a freshly instantiated module: only the
// pages in diff, or (diffOnly false) the whole memory.
func (img *image) restore(m api.Module, diffOnly bool) error {
	mem := m.Memory()
	if have := mem.Size(); have < img.size {
		if _, ok := mem.Grow((img.size - have) / 65536); !ok {
			return fmt.Errorf("cannot grow memory to %d bytes", img.size)
		}
	} else if have > img.size {
		return fmt.Errorf("a fresh instance has %d bytes of memory, more than the image's %d", have, img.size)
	}
	buf, ok := mem.Read(0, img.size)
	if !ok {
		return fmt.Errorf("memory of %d bytes unreadable", img.size)
	}
	if diffOnly {
		for _, i := range img.diff {
			copy(buf[i*imagePage:(i+1)*imagePage], img.mem[i*imagePage:])
		}
	} else {
		copy(buf, img.mem)
	}
	for name, v := range img.globals {
		g, ok := m.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("no mutable global %s", name)
		}
		g.Set(v)
	}
	return nil
}
