package orbstack

import (
	"context"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
)

// bootstrapScript installs what the egress step needs and a fresh OrbStack `debian`
// machine lacks: iptables (iptables-save/-restore and the ip6tables pair) and nftables
// (nft, which reads the nf_tables view back). It runs as root right after `orb create`
// (and after `orb start`), BEFORE lever's firewall exists, so it is kept to exactly that:
// the package lists and these two packages from the image's own Debian sources, which
// apt verifies against the image's keyring. Nothing of lever's is in the machine yet (no
// broker certificate, ticket, key or agent: those come after the egress step has built
// and verified LEVER_EGRESS). When both tools are present it only prints "present" and
// touches nothing, so a re-run costs one guest call and no network.
const bootstrapScript = `set -eu
need=""
{ command -v iptables-restore && command -v ip6tables-restore && command -v iptables-save; } >/dev/null 2>&1 || need="$need iptables"
command -v nft >/dev/null 2>&1 || need="$need nftables"
if [ -z "$need" ]; then echo present; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
log=/var/log/lever-bootstrap.log
if ! apt-get update -q >"$log" 2>&1 || ! apt-get install -y -q --no-install-recommends $need >>"$log" 2>&1; then
	echo "installing$need failed (see $log in the machine):" >&2
	tail -5 "$log" >&2
	exit 3
fi
echo "installed:$need"
`

// BootstrapCmd is the one guest call bootstrap makes.
func BootstrapCmd() guest.Cmd {
	return guest.Cmd{As: guest.Root, Argv: []string{"/bin/sh", "-c", bootstrapScript}}
}

// bootstrap makes the egress step's tools present in the machine (one root guest call).
func (b *Backend) bootstrap(ctx context.Context) error {
	res, err := b.Runner().Run(ctx, BootstrapCmd())
	if err != nil {
		return fmt.Errorf("preparing machine %s for the firewall: %w", b.o.Machine, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("preparing machine %s for the firewall (iptables, nftables): exit %d: %s", b.o.Machine, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}
