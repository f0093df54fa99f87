package brokerctl

import "syscall"

// setQuickAck sends the ACK the kernel holds back for what was just read, now.
func setQuickAck(fd uintptr) {
	syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
}
