package bringup

import (
	"context"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
)

// runHelper runs a guest-side helper mode (guestside.ModeEnrol, ModeImages) as root with
// the lev New chose for the guest's architecture, req on its stdin; without one it fails
// with New's reason. A non-zero exit is an error carrying the helper's stderr.
func (in *Instance) runHelper(ctx context.Context, mode string, req []byte) (guest.Result, error) {
	if in.levErr != nil {
		return guest.Result{}, in.levErr
	}
	if in.helper == nil {
		return guest.Result{}, fmt.Errorf("no guest helper (lev) chosen for this guest")
	}
	res, err := in.helper.Run(ctx, in.Runner, mode, req)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("lev %s %s exited %d: %s", guestside.Command, mode, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return res, err
}

// helperPath is where this lever's lev is installed in a VM guest ("" in place or without
// a helper), for the observation to look.
func (in *Instance) helperPath() string {
	if in.helper == nil {
		return ""
	}
	return in.helper.InstalledPath()
}
