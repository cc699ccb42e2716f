package hostcall

import (
	"embed"
	"io/fs"

	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	sysapi "github.com/tetratelabs/wazero/sys"
)

// The FS a guest mounts holds the channel file and the Python module:
//
//	call                    the channel: write a request frame, read the response
//	lib/fumehood/...        import fumehood (put lib on PYTHONPATH)
//	site/sitecustomize.py   routes http.client (so urllib) through the channel
const (
	// ChannelFile is the channel's name in FS.
	ChannelFile = "call"
	// PythonPath is the directory of FS to put on the guest's PYTHONPATH.
	PythonPath = "lib"
	// PythonSitePath, added to PYTHONPATH after PythonPath, makes
	// http.client and urllib go through the channel. It costs every run
	// some milliseconds of start-up, so put it there only when the
	// server has a network policy (see HasNetwork).
	PythonSitePath = "site"
)

// HasNetwork reports whether the server has a network policy.
func (s *Server) HasNetwork() bool { return s.transport != nil }

//go:embed all:guest
var guestFiles embed.FS

// FS returns the read-only filesystem to mount in the guest (wazero's
// experimental sys.FS). Each open of the channel file is a connection of
// its own.
func (s *Server) FS() sys.FS {
	sub, err := fs.Sub(guestFiles, "guest")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &mountFS{FS: &sysfs.AdaptFS{FS: sub}, s: s}
}

type mountFS struct {
	sys.FS
	s *Server
}

func (m *mountFS) OpenFile(path string, flag sys.Oflag, perm fs.FileMode) (sys.File, sys.Errno) {
	if path == ChannelFile {
		if flag&(sys.O_DIRECTORY|sys.O_TRUNC) != 0 {
			return nil, sys.EINVAL
		}
		return &channel{s: m.s}, 0
	}
	if flag&(sys.O_WRONLY|sys.O_RDWR|sys.O_CREAT|sys.O_TRUNC|sys.O_APPEND) != 0 {
		return nil, sys.EROFS
	}
	return m.FS.OpenFile(path, flag, perm)
}

func (m *mountFS) Stat(path string) (sysapi.Stat_t, sys.Errno) {
	if path == ChannelFile {
		return channelStat, 0
	}
	return m.FS.Stat(path)
}

func (m *mountFS) Lstat(path string) (sysapi.Stat_t, sys.Errno) {
	if path == ChannelFile {
		return channelStat, 0
	}
	return m.FS.Lstat(path)
}

var channelStat = sysapi.Stat_t{Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Nlink: 1, Ino: 1}

// channel is one open of the channel file: bytes written accumulate until
// they hold a whole request frame, which is served at once (on the guest's
// goroutine, inside its write); the response is then read back.
type channel struct {
	sys.UnimplementedFile
	s       *Server
	in, out []byte
	discard int // bytes left of a refused oversized frame
}

func (c *channel) Stat() (sysapi.Stat_t, sys.Errno) { return channelStat, 0 }
func (c *channel) IsDir() (bool, sys.Errno)         { return false, 0 }

func (c *channel) Write(p []byte) (int, sys.Errno) {
	n := len(p)
	if c.discard > 0 {
		skip := min(c.discard, len(p))
		c.discard -= skip
		p = p[skip:]
	}
	c.in = append(c.in, p...)
	for {
		header, body, used, err := DecodeFrame(c.in, c.s.maxFrame())
		if err != nil {
			// Answer once, and drop the rest of the frame as it arrives.
			c.out = append(c.out, errorFrame(kindOf(err), err)...)
			if len(c.in) >= frameHead {
				total := frameHead + int(uint64(be32(c.in))+uint64(be32(c.in[4:])))
				c.discard = max(total-len(c.in), 0)
			}
			c.in = c.in[:0]
			return n, 0
		}
		if used == 0 {
			return n, 0
		}
		c.out = append(c.out, c.s.serve(header, body)...)
		c.in = append(c.in[:0], c.in[used:]...)
	}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Read returns the pending response; with none pending it returns 0 (end
// of file) rather than blocking.
func (c *channel) Read(p []byte) (int, sys.Errno) {
	n := copy(p, c.out)
	c.out = c.out[n:]
	if len(c.out) == 0 {
		c.out = nil
	}
	return n, 0
}

func (c *channel) Close() sys.Errno {
	c.in, c.out = nil, nil
	return 0
}
