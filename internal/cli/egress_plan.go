package cli

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
)

type egressPlanOptions struct {
	config           string
	json             bool
	aliasV4, aliasV6 string
}

type planFamily struct {
	Family        string   `json:"family"`
	Rules         []string `json:"rules"`
	JumpRestore   string   `json:"jump_restore"`
	ChainRestore  string   `json:"chain_restore"`
	CommitOrder   int      `json:"commit_order"`
	ChainExists   *bool    `json:"chain_exists,omitempty"`
	JumpCopiesNow *int     `json:"jump_copies_now,omitempty"`
}

type planOut struct {
	Posture     string            `json:"posture"`
	AliasV4     string            `json:"alias_v4"`
	AliasV6     string            `json:"alias_v6,omitempty"`
	AliasSource guest.AliasSource `json:"alias_source"`
	Warnings    []string          `json:"warnings,omitempty"`
	Families    []planFamily      `json:"families"`
}

func newEgressPlanCmd() *cobra.Command {
	o := &egressPlanOptions{}
	c := &cobra.Command{
		Use:   "plan",
		Short: "Print the iptables-restore input per family (reads the guest unless --alias-v4 is given)",
		Long: `Print the iptables-restore --noflush input lever would commit, per family, in commit
order (IPv6 first, IPv4 last): the commit that makes OUTPUT's jump first and unique, then
the chain commit. The alias is resolved in the running guest (one read-only guest call);
with --alias-v4 (and optionally --alias-v6) the plan is made offline, assuming a live
chain and one jump copy. Nothing is changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON")
	c.Flags().StringVar(&o.aliasV4, "alias-v4", "", "plan offline with this IPv4 host alias address")
	c.Flags().StringVar(&o.aliasV6, "alias-v6", "", "plan offline with this IPv6 host alias address (with --alias-v4)")
	return c
}

// plan reads the guest (one read-only call) or, with --alias-v4, plans offline.
func (o *egressPlanOptions) plan(cmd *cobra.Command, cfg *config.Config) (guest.Desired, guest.Snapshot, error) {
	if o.aliasV4 == "" {
		b, err := backend.New(cfg)
		if err != nil {
			return guest.Desired{}, guest.Snapshot{}, err
		}
		spec := guest.SpecFor(cfg, b.HostAlias())
		snap, err := guest.TakeSnapshot(cmd.Context(), b.Runner(), guest.SnapshotRequest{Alias: spec.Alias, LimaDNS: spec.Lima})
		if err != nil {
			return guest.Desired{}, guest.Snapshot{}, err
		}
		d, err := guest.PlanEgress(spec, snap)
		return d, snap, err
	}
	a4, err := netip.ParseAddr(o.aliasV4)
	if err != nil {
		return guest.Desired{}, guest.Snapshot{}, fmt.Errorf("--alias-v4 %q: %w", o.aliasV4, err)
	}
	var a6 netip.Addr
	if o.aliasV6 != "" {
		if a6, err = netip.ParseAddr(o.aliasV6); err != nil {
			return guest.Desired{}, guest.Snapshot{}, fmt.Errorf("--alias-v6 %q: %w", o.aliasV6, err)
		}
	}
	return guest.PlanOffline(guest.SpecFor(cfg, ""), a4, a6)
}

func (o *egressPlanOptions) run(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	d, snap, err := o.plan(cmd, cfg)
	if err != nil {
		return err
	}
	online := o.aliasV4 == ""
	out := planOut{Posture: string(guest.SpecFor(cfg, "").Posture), AliasV4: d.AliasV4, AliasV6: d.AliasV6, AliasSource: d.AliasSource, Warnings: d.Warnings}
	for _, fc := range guest.PlannedCommits(snap, d.Ruleset) {
		pf := planFamily{Family: fc.Family.String(), Rules: fc.Rules, JumpRestore: fc.JumpRestore, ChainRestore: fc.ChainRestore, CommitOrder: fc.Order}
		if online {
			exists, copies := fc.Live.ChainExists, fc.Live.JumpCopies()
			pf.ChainExists, pf.JumpCopiesNow = &exists, &copies
		}
		out.Families = append(out.Families, pf)
	}
	if o.json {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	printPlan(cmd.OutOrStdout(), cmd.ErrOrStderr(), out)
	return nil
}

func printPlan(w, errw io.Writer, out planOut) {
	for _, warn := range out.Warnings {
		fmt.Fprintf(errw, "lever: warning: %s\n", warn)
	}
	fmt.Fprintf(w, "# posture %s, alias %s", out.Posture, out.AliasV4)
	if out.AliasV6 != "" {
		fmt.Fprintf(w, " / %s", out.AliasV6)
	}
	fmt.Fprintf(w, " (%s)\n", out.AliasSource)
	for _, pf := range out.Families {
		fmt.Fprintf(w, "# %s: jump first and unique (%s --noflush)\n%s", pf.Family, restoreTool(pf.Family), pf.JumpRestore)
	}
	for _, pf := range out.Families {
		fmt.Fprintf(w, "# %s: chain commit (%s --noflush)\n%s", pf.Family, restoreTool(pf.Family), pf.ChainRestore)
	}
}

func restoreTool(family string) string {
	if family == egress.V6.String() {
		return "ip6tables-restore"
	}
	return "iptables-restore"
}
