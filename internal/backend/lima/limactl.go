package lima

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/tail"
)

// AcceptedVersions says which limactl versions lever drives. Lima 1.2 is the line whose
// realized-config JSON and template schema lever was built and tested against (v1.2.2 in
// CI); Lima 2.x is not served by the Go module proxy here and is refused rather than
// assumed compatible.
const AcceptedVersions = "1.2.x"

var versionRE = regexp.MustCompile(`limactl version v?(\d+)\.(\d+)\.(\d+)`)

// CheckVersion parses `limactl --version` output and refuses versions outside AcceptedVersions.
func CheckVersion(out string) (string, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("limactl --version: cannot read a version from %q", strings.TrimSpace(out))
	}
	v := m[1] + "." + m[2] + "." + m[3]
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major != 1 || minor != 2 {
		return v, fmt.Errorf("limactl %s is not supported: lever accepts Lima %s", v, AcceptedVersions)
	}
	return v, nil
}

// limactl runs the limactl binary as the current (unprivileged) user.
type limactl struct {
	bin string
	env []string // extra environment (QEMU_SYSTEM_<ARCH> and LEVER_QEMU_SYSTEM for the TCG wrapper)
	// calls counts host-side limactl invocations (not guest round-trips).
	calls int
}

func (l *limactl) run(ctx context.Context, args ...string) ([]byte, error) {
	l.calls++
	cmd := exec.CommandContext(ctx, l.bin, args...)
	cmd.Env = append(os.Environ(), l.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// limactl start leaves a host agent running; it must not keep our pipes open.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("limactl %s: %w: %s", strings.Join(args, " "), err, tail.Lines(stderr.String(), 15, "\n"))
	}
	return stdout.Bytes(), nil
}
