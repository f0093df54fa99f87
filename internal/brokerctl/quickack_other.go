//go:build !linux

package brokerctl

// setQuickAck does nothing where TCP_QUICKACK does not exist (the broker runs on the
// macOS host too; its delayed-ACK behaviour differs).
func setQuickAck(uintptr) {}
