package hostchan

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fumehood/fumehood/hostcall"
)

// A frame is one request or one response on the channel:
//
//	u32 header length H (big endian)
//	u32 body length B (big endian)
//	H bytes of header: a JSON object
//	B bytes of body: raw bytes (an HTTP body), usually empty
//
// The guest writes one request frame and then reads one response frame.
const frameHead = 8

// ErrFrame reports bytes on the channel that are not a well-formed frame.
var ErrFrame = errors.New("hostcall: malformed frame")

// AppendFrame appends a frame holding header and body to dst.
func AppendFrame(dst, header, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(header)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	dst = append(dst, header...)
	return append(dst, body...)
}

// DecodeFrame decodes the frame at the start of b. It returns n == 0 and no
// error when b holds only part of a frame, and an error matching ErrFrame
// or ErrTooLarge when the frame is malformed or its header and body together
// exceed limit bytes. header and body alias b.
func DecodeFrame(b []byte, limit int) (header, body []byte, n int, err error) {
	if len(b) < frameHead {
		return nil, nil, 0, nil
	}
	h := uint64(binary.BigEndian.Uint32(b))
	l := uint64(binary.BigEndian.Uint32(b[4:]))
	if h == 0 {
		return nil, nil, 0, fmt.Errorf("%w: empty header", ErrFrame)
	}
	if h+l > uint64(max(limit, 0)) {
		return nil, nil, 0, fmt.Errorf("%w: a frame of %d bytes, the limit is %d", hostcall.ErrTooLarge, h+l, limit)
	}
	end := frameHead + int(h+l)
	if len(b) < end {
		return nil, nil, 0, nil
	}
	return b[frameHead : frameHead+int(h)], b[frameHead+int(h) : end], end, nil
}

// ErrNoRun reports a request while no run is bound to the server.
var ErrNoRun = errors.New("hostcall: no run in progress")
