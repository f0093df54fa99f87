//go:build !linux

package deathsig

import "syscall"

// Set has no death signal to ask for here: lev's tools run in the Linux jail, and this
// build is lev's client side (a Mac's lev talks to the jail's).
func Set(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }
