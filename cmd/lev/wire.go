package main

// The issue-6 packages plug in here, at link time, without the core knowing them:
//   - policy.NewCommand is lev policy;
//   - a package that calls pipeline.RegisterGate / pipeline.RegisterExecutor in its init
//     is blank-imported so its gate or executor serves every run.

import (
	"github.com/lever-jail/lever/internal/lev/cli"
	"github.com/lever-jail/lever/internal/lev/policy"
)

func init() {
	cli.PolicyCommand = policy.NewCommand
}
