// Command lever is the host operator: it builds the jail, its egress firewall and the
// broker, and starts lev inside it. Every command, its flags and its exit status live in
// internal/cli, so this file must stay the one call into it.
package main

import (
	"os"

	"github.com/lever-jail/lever/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
