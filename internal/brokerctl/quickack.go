package brokerctl

import (
	"net"
	"syscall"
)

// quickAckListener makes the jail listener's connections acknowledge what they read at
// once. A client that writes a request's header and body in two packets with Nagle on
// (many HTTP/1.1 clients outside Go do) holds the body until the header is acknowledged,
// and Linux delays that ACK by up to 40 ms on a connection it has seen answer requests
// (delayed ACK): each such call waited ~44 ms in the broker (BenchmarkBrokerOverhead's
// twopacket case). Quick ACK mode lasts only until the kernel leaves it again, so it is
// set anew after every read; a connection that is not TCP is passed through.
type quickAckListener struct{ net.Listener }

func (l quickAckListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &quickAckConn{TCPConn: tc, rc: rc}, nil
}

type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		c.rc.Control(setQuickAck)
	}
	return n, err
}
