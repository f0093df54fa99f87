package main

// The issue-6 packages plug in here, at link time, without the core knowing them:
//   - policy.NewCommand is lev policy;
//   - a package that calls pipeline.RegisterGate / pipeline.RegisterExecutor in its init
//     is blank-imported so its gate or executor serves every run.

import (
	"github.com/lever-jail/lever/internal/lev/cli"
	"github.com/lever-jail/lever/internal/lev/policy"
	_ "github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec" // issue 6: sandboxed shell
	_ "github.com/lever-jail/lever/internal/lev/taint/taintgate"     // issue 6: taint gate
)

func init() {
	cli.PolicyCommand = policy.NewCommand
}
