package provision

import (
	"context"

	"github.com/lever-jail/lever/internal/guest"
)

type countRunner struct{ n int }

func (c *countRunner) Run(context.Context, guest.Cmd) (guest.Result, error) {
	c.n++
	return guest.Result{}, nil
}
