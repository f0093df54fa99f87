//go:build unix && !linux

package labels

import (
	"syscall"
	"time"
)

// ctimeOf is the status-change time in the BSDs' and macOS's stat layout (lev's client
// side builds there; the jail's lev is Linux).
func ctimeOf(st *syscall.Stat_t) time.Time {
	return time.Unix(int64(st.Ctimespec.Sec), int64(st.Ctimespec.Nsec))
}
