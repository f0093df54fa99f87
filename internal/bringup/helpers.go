package bringup

import (
	"fmt"
	"os"
	"strings"

	"github.com/lever-jail/lever/internal/acceptance"
)

// helperArgv runs lever's guest-side helpers: `lever acceptance __guest` (probes) and
// `lever acceptance __enrol`; the test binaries use the environment switch instead.
func helperArgv(exe string, inPlace bool, mode string) ([]string, []byte, error) {
	argv, prefix, err := acceptance.GuestArgv(exe, inPlace)
	if err != nil {
		return nil, nil, err
	}
	return swapMode(argv, mode), prefix, nil
}

// swapMode points GuestArgv's command at another helper mode.
func swapMode(argv []string, mode string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, acceptance.ProbeEnv+"=1", HelperEnv+"="+mode)
	}
	return out
}

// HelperEnv selects a guest-side helper mode in lever (or a test binary).
const HelperEnv = "LEVER_GUEST_HELPER"

// MaybeServeHelper turns this process into a guest-side helper when HelperEnv is set.
func MaybeServeHelper() {
	switch os.Getenv(HelperEnv) {
	case "":
		return
	case "enrol":
		if err := ServeEnrol(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown guest helper mode", os.Getenv(HelperEnv))
		os.Exit(2)
	}
	os.Exit(0)
}
