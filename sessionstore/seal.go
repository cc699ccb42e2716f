package sessionstore

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// headRecord is a head as stored: everything but the revision, which the
// backend keeps, and a tag over the rest.
type headRecord struct {
	Version int    `json:"v"`
	Name    string `json:"name"`
	Digest  string `json:"digest"`
	Size    int64  `json:"size"`
	ID      string `json:"id"`
	Created int64  `json:"created"` // Unix nanoseconds
	Updated int64  `json:"updated"`
	Tag     string `json:"tag,omitempty"` // HMAC-SHA256 in hex; none without a key
}

// headTag is a head's HMAC: it binds the snapshot to the conversation's
// name, so a valid head cannot be moved to another conversation.
func (s *store) headTag(r *headRecord) string {
	m := hmac.New(sha256.New, s.opts.Key)
	for _, f := range []string{"fumehood-head-v1", r.Name, r.Digest, r.ID, strconv.FormatInt(r.Size, 10),
		strconv.FormatInt(r.Created, 10), strconv.FormatInt(r.Updated, 10)} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

func (s *store) sealHead(name string, h Head) []byte {
	r := headRecord{Version: 1, Name: name, Digest: h.Digest, Size: h.Size, ID: h.ID,
		Created: h.Created.UnixNano(), Updated: h.Updated.UnixNano()}
	if s.opts.Key != nil {
		r.Tag = s.headTag(&r)
	}
	b, _ := json.Marshal(&r) // cannot fail: strings and integers
	return b
}

func (s *store) openHead(name string, raw []byte) (Head, error) {
	var r headRecord
	if err := json.Unmarshal(raw, &r); err != nil || r.Version != 1 {
		return Head{}, fmt.Errorf("%w: the head is not a version 1 head record", ErrTampered)
	}
	if s.opts.Key != nil {
		if r.Tag == "" {
			return Head{}, fmt.Errorf("%w: the head has no tag (written without the key?)", ErrTampered)
		}
		if !hmac.Equal([]byte(r.Tag), []byte(s.headTag(&r))) {
			return Head{}, fmt.Errorf("%w: the head's tag is wrong (forged, changed, or another key)", ErrTampered)
		}
	}
	ref := Ref{Digest: r.Digest, Size: r.Size, ID: r.ID}
	if r.Name != name || !validRef(ref) {
		return Head{}, fmt.Errorf("%w: the head names conversation %q, snapshot %q", ErrTampered, r.Name, r.ID)
	}
	return Head{Ref: ref,
		Created: time.Unix(0, r.Created).UTC(), Updated: time.Unix(0, r.Updated).UTC()}, nil
}

// blobMagic begins a stored snapshot, followed by its tag and its bytes.
var blobMagic = []byte("FHSS\x01")

// blobTag is a snapshot's HMAC, over its conversation, ID and digest;
// zeros without a key.
func (s *store) blobTag(name string, ref Ref) []byte {
	if s.opts.Key == nil {
		return make([]byte, sha256.Size)
	}
	m := hmac.New(sha256.New, s.opts.Key)
	for _, f := range []string{"fumehood-snapshot-v1", name, ref.ID, ref.Digest} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

func (s *store) sealBlob(name string, ref Ref, data []byte) []byte {
	b := make([]byte, 0, len(blobMagic)+sha256.Size+len(data))
	b = append(b, blobMagic...)
	b = append(b, s.blobTag(name, ref)...)
	return append(b, data...)
}

func (s *store) openBlob(name string, ref Ref, raw []byte) ([]byte, error) {
	n := len(blobMagic) + sha256.Size
	if len(raw) < n || !bytes.Equal(raw[:len(blobMagic)], blobMagic) {
		return nil, fmt.Errorf("%w: the snapshot is not a stored snapshot", ErrTampered)
	}
	tag, data := raw[len(blobMagic):n], raw[n:]
	if s.opts.Key != nil && !hmac.Equal(tag, s.blobTag(name, ref)) {
		return nil, fmt.Errorf("%w: the snapshot's tag is wrong or missing", ErrTampered)
	}
	if got := RefOf(data); got.Digest != ref.Digest || got.Size != ref.Size {
		return nil, fmt.Errorf("%w: the snapshot's bytes do not match their address", ErrTampered)
	}
	return data, nil
}
