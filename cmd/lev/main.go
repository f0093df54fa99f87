// Command lev is the agent runtime that runs inside the jail (placeholder until built).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "lev: not built yet")
	os.Exit(2)
}
