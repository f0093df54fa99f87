package main

// lev policy plugs in here. The taint gate and the sandbox executor are not plugged in
// by import side effect: lev serve passes their factories to the run engine itself
// (internal/lev/cli/serve.go), and an engine without either refuses to start.

import (
	"github.com/lever-jail/lever/internal/lev/cli"
	"github.com/lever-jail/lever/internal/lev/policy"
)

func init() {
	cli.PolicyCommand = policy.NewCommand
}
