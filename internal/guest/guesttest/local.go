package guesttest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"

	"github.com/lever-jail/lever/internal/guest"
)

// Local runs each guest command on this machine with a real process (its sh, its tools):
// for tests of the guest scripts themselves. Env, when set, is the command's whole
// environment (PATH with stand-ins first, say); otherwise it inherits the test's.
type Local struct{ Env []string }

// Run implements guest.Runner: a non-zero exit is the result's ExitCode, not an error.
func (l Local) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = l.Env
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := guest.Result{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode, err = ee.ExitCode(), nil
	}
	return res, err
}
