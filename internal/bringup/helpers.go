package bringup

import "github.com/lever-jail/lever/internal/guestside"

// helperArgv runs a guest-side helper mode (guestside.ModeEnrol, ModeProbe) with the lev
// New chose for the guest's architecture; without one it fails with New's reason.
func (in *Instance) helperArgv(mode string) ([]string, []byte, error) {
	if in.levErr != nil {
		return nil, nil, in.levErr
	}
	return guestside.Argv(in.levBin, in.InPlace, mode)
}
