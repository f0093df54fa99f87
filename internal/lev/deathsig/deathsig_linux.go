// Package deathsig ties a child process's life to lev's: every process lev starts (a
// command, an MCP server, a sandbox's runtime) is killed by the kernel when lev dies, by
// any signal, SIGKILL included, so nothing lev started outlives it (issue 27 item 9).
package deathsig

import "syscall"

// Set asks for SIGKILL to the child at lev's death and returns a. Go sets the death
// signal after any credential switch, which would otherwise clear it.
func Set(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Pdeathsig = syscall.SIGKILL
	return a
}
