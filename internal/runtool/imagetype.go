package runtool

import (
	"bytes"
	"image/jpeg"
	"image/png"
	"path"
	"strings"
	"unicode/utf8"
)

// sniffLen is how much of an image too large to attach is read to tell
// whether it is one.
const sniffLen = 512

// imageName reports whether a file's name is that of an image a result
// may carry: .png, .jpg, .jpeg or .svg. The name only chooses the files
// to look at; imageType decides from the content.
func imageName(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".png", ".jpg", ".jpeg", ".svg":
		return true
	}
	return false
}

// imageType is the media type of an image file named name whose content
// is data (whole, or only its start if whole is false), or "" if the
// content is not the image the name says: a PNG or JPEG must have a
// header its decoder accepts (an SDK forwarding a text file named x.png
// as an image block would get the whole model request refused), an SVG
// must be UTF-8 text with an <svg element.
func imageType(name string, data []byte, whole bool) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".png":
		if _, err := png.DecodeConfig(bytes.NewReader(data)); err == nil {
			return "image/png"
		}
	case ".jpg", ".jpeg":
		if !whole && bytes.HasPrefix(data, []byte("\xff\xd8\xff")) {
			return "image/jpeg" // its frame header may be past the start read
		}
		if _, err := jpeg.DecodeConfig(bytes.NewReader(data)); err == nil {
			return "image/jpeg"
		}
	case ".svg":
		text := data
		if !whole {
			// A character may be cut at the end of the start read.
			for i := 0; i < utf8.UTFMax && len(text) > 0 && !utf8.Valid(text); i++ {
				text = text[:len(text)-1]
			}
		}
		if utf8.Valid(text) && bytes.Contains(text, []byte("<svg")) {
			return "image/svg+xml"
		}
	}
	return ""
}
