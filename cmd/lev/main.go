// Command lev is the agent runtime: lev serve, run, resume, ps, validate, policy.
package main

import (
	"os"

	"github.com/lever-jail/lever/internal/lev/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
