package hostchan

import (
	"io/fs"

	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	sysapi "github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/wasi"
)

// The FS a guest mounts holds the channel file and the Python module
// (guests/cpython/python/hostcall, in cpython.Code):
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

// MaxOpen bounds the handles a guest may hold open at once in a server's
// FS, opens of the channel and of the module's files together: past it,
// opening fails with EMFILE (wasi.EMFILE, delivered to the guest through
// the hook set by ReportErrno). Each handle costs the host a little memory;
// the frames and responses of all channels share one budget (see Usage).
const MaxOpen = 64

// HasNetwork reports whether the server has a network policy.
func (s *Server) HasNetwork() bool { return s.transport != nil }

// FS returns the read-only filesystem to mount in the guest (wazero's
// experimental sys.FS). Each open of the channel file is a connection of
// its own.
func (s *Server) FS() sys.FS {
	sub, err := fs.Sub(cpython.Code, "python/hostcall")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &mountFS{FS: &sysfs.AdaptFS{FS: sub}, s: s}
}

// ReportErrno sets the hook that passes on the errnos wazero cannot express
// (EMFILE past MaxOpen), as wasi.Options.ReportErrno does for a wasi.FS.
// Call it before FS is mounted.
func (s *Server) ReportErrno(report func(errno uint16)) { s.report = report }

type mountFS struct {
	sys.FS
	s *Server
}

func (m *mountFS) OpenFile(path string, flag sys.Oflag, perm fs.FileMode) (sys.File, sys.Errno) {
	if path == ChannelFile {
		if flag&(sys.O_DIRECTORY|sys.O_TRUNC) != 0 {
			return nil, sys.EINVAL
		}
		if errno := m.s.openHandle(); errno != 0 {
			return nil, errno
		}
		return &channel{s: m.s}, 0
	}
	if flag&(sys.O_WRONLY|sys.O_RDWR|sys.O_CREAT|sys.O_TRUNC|sys.O_APPEND) != 0 {
		return nil, sys.EROFS
	}
	if errno := m.s.openHandle(); errno != 0 {
		return nil, errno
	}
	f, errno := m.FS.OpenFile(path, flag, perm)
	if errno != 0 {
		m.s.closeHandle()
		return nil, errno
	}
	return &countedFile{File: f, s: m.s}, 0
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

// openHandle counts a new handle of FS, or refuses it past MaxOpen.
func (s *Server) openHandle() sys.Errno {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.handles >= MaxOpen {
		if s.report != nil {
			s.report(uint16(wasi.EMFILE - 4096))
		}
		return wasi.EMFILE
	}
	s.handles++
	return 0
}

func (s *Server) closeHandle() {
	s.cmu.Lock()
	s.handles--
	s.cmu.Unlock()
}

// countedFile is an open file of the module, counted against MaxOpen.
type countedFile struct {
	sys.File
	s      *Server
	closed bool
}

func (f *countedFile) Close() sys.Errno {
	if !f.closed {
		f.closed = true
		f.s.closeHandle()
	}
	return f.File.Close()
}

// channel is one open of the channel file. A request is one frame: its
// 8-byte head is collected in head, then its header and body in in (sized
// to the frame exactly, once the head says how long it is), and the whole
// frame is served at once, on the guest's goroutine, inside its write; the
// response is then read back from out.
//
// A channel accepts bytes up to the end of one frame (a longer write is
// short) and, until that frame's response is read to its end, refuses to
// start another with EAGAIN. Only one channel of a server at a time may
// hold a request or an unread response (the server's slot): a guest that
// starts a frame on another meanwhile gets EAGAIN too. So the server holds
// at most one request frame and one response for its guest (see Usage).
type channel struct {
	sys.UnimplementedFile
	s       *Server
	head    [frameHead]byte
	nhead   int    // bytes of head received
	in      []byte // the frame being received; nil when none
	out     []byte // the response; nil when none
	pos     int    // bytes of out read
	discard uint64 // bytes left of a refused frame, dropped as they arrive
	closed  bool
}

func (c *channel) Stat() (sysapi.Stat_t, sys.Errno) { return channelStat, 0 }
func (c *channel) IsDir() (bool, sys.Errno)         { return false, 0 }

func (c *channel) Write(p []byte) (int, sys.Errno) {
	if c.closed {
		return 0, sys.EBADF
	}
	n := 0
	for len(p) > 0 {
		switch {
		case c.discard > 0:
			k := int(min(c.discard, uint64(len(p))))
			c.discard -= uint64(k)
			p, n = p[k:], n+k
			if c.discard == 0 {
				c.releaseIfIdle()
			}
		case c.in != nil:
			k := min(cap(c.in)-len(c.in), len(p))
			c.in = append(c.in, p[:k]...)
			p, n = p[k:], n+k
			if len(c.in) == cap(c.in) {
				c.serve()
				return n, 0 // one frame per write: the rest waits for the response to be read
			}
		case c.out != nil && c.nhead == 0:
			// A response is unread: the next frame must wait for it.
			if n > 0 {
				return n, 0
			}
			return 0, sys.EAGAIN
		default:
			if c.nhead == 0 && !c.s.acquire(c) {
				if n > 0 {
					return n, 0
				}
				return 0, sys.EAGAIN
			}
			k := copy(c.head[c.nhead:], p)
			c.nhead += k
			p, n = p[k:], n+k
			if c.nhead == frameHead {
				c.nhead = 0
				c.startFrame()
			}
		}
	}
	return n, 0
}

// startFrame reads the head of a frame: it sets in to receive the frame or,
// for a frame the server refuses unread, sets the error response and the
// bytes to drop.
func (c *channel) startFrame() {
	h, l := uint64(be32(c.head[:])), uint64(be32(c.head[4:]))
	_, _, _, err := DecodeFrame(c.head[:], c.s.maxFrame())
	if err != nil {
		c.discard = h + l
		c.setOut(errorFrame(kindOf(err), err))
		return
	}
	// DecodeFrame checked h+l against the frame limit, which fits an int.
	c.in = make([]byte, 0, int(h+l))
	c.s.charge(int64(cap(c.in)))
}

// serve answers the frame in in.
func (c *channel) serve() {
	header, body := c.in[:be32(c.head[:])], c.in[be32(c.head[:]):]
	resp := c.s.serve(header, body)
	c.s.charge(-int64(cap(c.in)))
	c.in = nil
	c.setOut(resp)
}

func (c *channel) setOut(resp []byte) {
	c.out, c.pos = resp, 0
	c.s.charge(int64(cap(c.out)))
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Read returns the pending response; with none pending it returns 0 (end
// of file) rather than blocking.
func (c *channel) Read(p []byte) (int, sys.Errno) {
	if c.closed {
		return 0, sys.EBADF
	}
	if c.out == nil {
		return 0, 0
	}
	n := copy(p, c.out[c.pos:])
	c.pos += n
	if c.pos == len(c.out) {
		c.s.charge(-int64(cap(c.out)))
		c.out, c.pos = nil, 0
		c.releaseIfIdle()
	}
	return n, 0
}

// releaseIfIdle gives the server's slot back once the channel holds nothing.
func (c *channel) releaseIfIdle() {
	if c.in == nil && c.out == nil && c.nhead == 0 && c.discard == 0 {
		c.s.release(c)
	}
}

func (c *channel) Close() sys.Errno {
	if c.closed {
		return 0
	}
	c.closed = true
	c.s.charge(-int64(cap(c.in) + cap(c.out)))
	c.in, c.out, c.nhead, c.discard = nil, nil, 0, 0
	c.s.release(c)
	c.s.closeHandle()
	return 0
}
