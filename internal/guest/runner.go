// Package guest does everything lever does inside the jail, through one seam: Runner. It
// owns the guest's egress snapshot, plan (live or offline), apply and verify, and the one
// structured script format guest calls answer in (Script: sections with a per-call nonce).
// It must not render or compare rules itself (internal/egress does, without I/O), know
// which backend made the guest, decide when a step runs (bring-up does), reach the guest
// any way but a Runner, or print: callers decide what to say.
package guest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
)

// As says whose identity a guest command runs under.
type As int

const (
	// Root runs the command as root in the guest (orb -u root, limactl shell ... sudo,
	// ip netns exec).
	Root As = iota
	// RunUser runs the command as the guest's unprivileged run user, the owner of the
	// rootless podman that holds lev.
	RunUser
)

func (a As) String() string {
	if a == RunUser {
		return "run-user"
	}
	return "root"
}

// Cmd is one command to run in the guest.
type Cmd struct {
	Argv  []string
	As    As
	Stdin []byte
}

// Result is what a guest command produced. A non-zero ExitCode is not an error of Run;
// Run's error is reserved for failing to reach the guest at all.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// Runner runs commands in the guest. Every backend provides exactly one; everything that
// touches the guest goes through it, so the number of calls is a measurable cost (each one
// is a limactl shell or orb round-trip on a real VM).
type Runner interface {
	Run(ctx context.Context, c Cmd) (Result, error)
}

// RunOK runs c and turns a non-zero exit into an error that carries stderr.
func RunOK(ctx context.Context, r Runner, c Cmd) (Result, error) {
	res, err := r.Run(ctx, c)
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("%s exited %d: %s", strings.Join(c.Argv, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return res, nil
}

// Counting wraps a Runner and counts round-trips.
type Counting struct {
	Inner Runner
	n     atomic.Int64
}

// Run forwards to the inner runner and counts the call.
func (c *Counting) Run(ctx context.Context, cmd Cmd) (Result, error) {
	c.n.Add(1)
	return c.Inner.Run(ctx, cmd)
}

// Calls reports how many guest round-trips have been made.
func (c *Counting) Calls() int64 { return c.n.Load() }

// Reset sets the count back to zero.
func (c *Counting) Reset() { c.n.Store(0) }
