package containers

import (
	"testing"

	"github.com/containers/podman/v5/libpod/define"
)

// TestStatusMatchesLibpod: every Status constant is the string podman's inspect reports
// for the libpod state it names, so a status compared against a constant means what
// podman said. A bad state spells itself "bad state", which no constant matches.
func TestStatusMatchesLibpod(t *testing.T) {
	cases := []struct {
		lib  define.ContainerStatus
		want Status
	}{
		{define.ContainerStateUnknown, StatusUnknown},
		{define.ContainerStateConfigured, StatusCreated},
		{define.ContainerStateCreated, StatusInitialized},
		{define.ContainerStateRunning, StatusRunning},
		{define.ContainerStateStopped, StatusStopped},
		{define.ContainerStatePaused, StatusPaused},
		{define.ContainerStateExited, StatusExited},
		{define.ContainerStateRemoving, StatusRemoving},
		{define.ContainerStateStopping, StatusStopping},
	}
	for _, tc := range cases {
		if got := Status(tc.lib.String()); got != tc.want {
			t.Errorf("libpod state %d reads %q, constant is %q", tc.lib, got, tc.want)
		}
	}
	for _, s := range []Status{StatusUnknown, StatusCreated, StatusInitialized, StatusRunning, StatusStopped, StatusPaused, StatusExited, StatusRemoving, StatusStopping} {
		if Status(define.ContainerStatus(99).String()) == s {
			t.Errorf("an out-of-range libpod state reads as %q", s)
		}
	}
}
