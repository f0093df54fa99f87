//go:build e2e && linux

package guest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread that has joined the named network namespace. Sockets
// fn creates belong to that namespace for their whole life, whichever thread later uses
// them. If the thread cannot be moved back it stays locked, so the runtime discards it.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err)
			return // thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// listenIn opens a TCP listener inside ns that accepts and closes connections until the
// test ends.
func listenIn(t testing.TB, ns, network, addr string) {
	t.Helper()
	var ln net.Listener
	if err := inNetns(ns, func() (err error) { ln, err = net.Listen(network, addr); return }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// Connect outcomes, as the kernel reports them to a direct socket.
const (
	Connected   = "connected"
	Unreachable = "no route to host" // EHOSTUNREACH: the REJECT's icmp-host-prohibited
	Refused     = "refused"
	Denied      = "denied" // EACCES/EPERM
	TimedOut    = "timed out"
)

// dialTimeout is short: a DROP shows as a timeout, and REJECT/accept answer in well under
// a millisecond on a veth.
const dialTimeout = 400 * time.Millisecond

// dialFrom connects from inside ns and classifies the result. It also returns how long
// the attempt took, for the log (never asserted).
func dialFrom(ns, addr string) (string, time.Duration, error) {
	var outcome string
	var took time.Duration
	err := inNetns(ns, func() error {
		d := net.Dialer{Timeout: dialTimeout}
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", addr)
		took = time.Since(start)
		switch {
		case err == nil:
			c.Close()
			outcome = Connected
		case errors.Is(err, syscall.EHOSTUNREACH):
			outcome = Unreachable
		case errors.Is(err, syscall.ECONNREFUSED):
			outcome = Refused
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			outcome = Denied
		case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
			outcome = TimedOut
		default:
			return fmt.Errorf("dial %s: unexpected error %w", addr, err)
		}
		return nil
	})
	return outcome, took, err
}
