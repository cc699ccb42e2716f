package sandbox

// Unexported names the external tests (package sandbox_test) check
// against.
const (
	ControlPath   = controlPath
	HostMountPath = hostMountPath
)

// DefaultRootQuota is the in-memory root's quota when a Config sets none.
var DefaultRootQuota = defaultRootQuota

// ProcessCPU is processCPU, for the external tests' benchmarks.
var ProcessCPU = processCPU

// ErrInternal is errInternal, the host's own failure on a guest's call.
var ErrInternal = errInternal
