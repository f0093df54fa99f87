//go:build e2e

package sandboxexec

import (
	"os"
	"testing"

	"github.com/lever-jail/lever/internal/lev/sandbox"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == sandbox.KeepAliveArg {
		// This test binary is the warm containers' PID 1, as lev's is in production.
		os.Exit(sandbox.KeepAliveMain())
	}
	os.Exit(m.Run())
}
