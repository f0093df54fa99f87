package labels

import (
	"syscall"
	"time"
)

// ctimeOf is the status-change time in Linux's stat layout.
func ctimeOf(st *syscall.Stat_t) time.Time { return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)) }
