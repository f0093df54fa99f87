//go:build !linux

package sandbox

import (
	"errors"
)

// prctlNotDumpable is Linux's; the keep-alive refuses to run without it.
func prctlNotDumpable() error {
	return errors.New("the sandbox keep-alive runs only on Linux (PR_SET_DUMPABLE)")
}
