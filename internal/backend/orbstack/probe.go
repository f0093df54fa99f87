package orbstack

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
)

// AcceptedVersions says which OrbStack versions lever drives: 2.1 added isolated machines
// (`orb create --isolated`), which the jail depends on; 3.x is refused until tested.
const AcceptedVersions = ">= 2.1.0, < 3.0.0"

var versionRE = regexp.MustCompile(`Version:\s*v?(\d+)\.(\d+)\.(\d+)`)

// CheckVersion reads `orb version` output and refuses versions outside AcceptedVersions.
func CheckVersion(out string) (string, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("orb version: cannot read a version from %q", strings.TrimSpace(out))
	}
	v := m[1] + "." + m[2] + "." + m[3]
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major != 2 || minor < 1 {
		return v, fmt.Errorf("OrbStack %s is not supported: lever accepts OrbStack %s (isolated machines)", v, AcceptedVersions)
	}
	return v, nil
}

// ProbeEnv is what Probe asks of the host; zero values mean the real host.
type ProbeEnv struct {
	GOOS     string
	LookPath func(string) (string, error)
}

// Probe says whether OrbStack can be used here now: macOS, orb on PATH, a supported version.
func Probe(ctx context.Context, x Exec, env ProbeEnv) backend.Availability {
	goos := env.GOOS
	if goos == "" {
		goos = runtime.GOOS
	}
	look := env.LookPath
	if look == nil {
		look = exec.LookPath
	}
	path, err := look(Tool)
	if err != nil {
		reason := "orb not found on PATH (install OrbStack)"
		if goos != "darwin" {
			reason = fmt.Sprintf("OrbStack runs only on macOS (this host is %s); orb not found on PATH", goos)
		}
		return backend.Availability{Reason: reason}
	}
	a := backend.Availability{Tool: path}
	if he, ok := x.(HostExec); ok && he.Path == "" {
		x = HostExec{Path: path}
	}
	stdout, stderr, code, err := x.Run(ctx, []string{"version"}, nil)
	if err != nil || code != 0 {
		a.Reason = fmt.Sprintf("orb version failed: %s", strings.TrimSpace(string(stderr)+errString(err)))
		return a
	}
	v, err := CheckVersion(string(stdout))
	a.Version = v
	if err != nil {
		a.Reason = err.Error()
		return a
	}
	if goos != "darwin" {
		a.Reason = fmt.Sprintf("OrbStack runs only on macOS (this host is %s)", goos)
		return a
	}
	a.Usable = true
	return a
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
