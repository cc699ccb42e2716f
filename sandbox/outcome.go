package sandbox

// Limit reports whether the reason is a limit of the run's that stopped
// it: StopFuel, StopDeadline, StopMemory, StopOutput or StopStack (the
// guest ran out of stack). The others are the guest's own exit or trap, a
// canceled context and fumehood's own failure.
func (s StopReason) Limit() bool {
	switch s {
	case StopFuel, StopDeadline, StopMemory, StopOutput, StopStack:
		return true
	}
	return false
}
