package sessionstore

import "fmt"

// MaxName bounds a conversation name's length, in bytes.
const MaxName = 128

// CheckName returns an error matching ErrBadName unless name is 1 to
// MaxName bytes of ASCII letters, digits, '-', '_' and '.', begins with a
// letter or digit, and holds no "..": a name is a file name in a directory
// store and a key in NATS, and never a path.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxName:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadName, len(name), MaxName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		switch {
		case i == 0 && !alnum:
			return fmt.Errorf("%w: %q must begin with a letter or digit", ErrBadName, name)
		case c == '.' && i+1 < len(name) && name[i+1] == '.', c == '.' && i+1 == len(name):
			return fmt.Errorf("%w: %q holds \"..\" or ends with '.'", ErrBadName, name)
		case !alnum && c != '-' && c != '_' && c != '.':
			return fmt.Errorf("%w: %q holds %q: use letters, digits, '-', '_' and '.'", ErrBadName, name, string(rune(c)))
		}
	}
	return nil
}
