// Command lev is the agent runtime: lev serve, run, resume, ps, validate, policy. It owns
// nothing but the process: every command, its flags and its exit status live in
// internal/lev/cli, so this file must stay the one call into it.
package main

import (
	"os"

	"github.com/lever-jail/lever/internal/lev/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
