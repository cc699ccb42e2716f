package hostcall

// Defaults applied when a Config leaves a limit zero.
const (
	DefaultMaxCalls         = 10_000
	DefaultMaxRequestBytes  = 1 << 20
	DefaultMaxResponseBytes = 1 << 20
)

// Config lists the host functions a guest may call, and bounds the calls.
type Config struct {
	// Funcs maps each name the guest may call to its handler.
	Funcs map[string]Handler
	// MaxCalls bounds the calls of one run; 0 means DefaultMaxCalls.
	MaxCalls int
	// MaxRequestBytes bounds a call's encoded arguments; 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// MaxResponseBytes bounds a call's encoded result; 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int
}
