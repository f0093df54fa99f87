//go:build e2e

package lima

import (
	"context"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/guest"
)

// recorder passes commands to the real guest and keeps each exchange.
type recorder struct {
	inner guest.Runner
	mu    sync.Mutex
	log   []exchange
}

func (r *recorder) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	res, err := r.inner.Run(ctx, c)
	// A guest.Script's marker nonce differs on every call: recorded as the placeholder.
	mark := scriptMark(c)
	stdin, stdout := string(c.Stdin), string(res.Stdout)
	if mark != "" {
		stdin, stdout = strings.ReplaceAll(stdin, mark, recordedMark), strings.ReplaceAll(stdout, mark, recordedMark)
	}
	r.mu.Lock()
	r.log = append(r.log, exchange{Argv: c.Argv, As: c.As.String(), Stdin: stdin, Stdout: stdout, Stderr: string(res.Stderr), ExitCode: res.ExitCode})
	r.mu.Unlock()
	return res, err
}
