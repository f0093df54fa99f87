package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	_ "github.com/lever-jail/lever/internal/backend/all" // registers every backend
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
)

func newEgressCmd() *cobra.Command {
	c := &cobra.Command{Use: "egress", Short: "Plan, apply and verify the LEVER_EGRESS firewall"}
	c.AddCommand(newEgressPlanCmd(), newEgressApplyCmd(), newEgressVerifyCmd())
	return c
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// egressTarget loads the config and builds its backend.
func egressTarget(cmd *cobra.Command, args []string) (*config.Config, backend.Backend, error) {
	cfg, err := config.Load(configArgFor(cmd, args))
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, b, nil
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
	Posture     string       `json:"posture"`
	AliasV4     string       `json:"alias_v4"`
	AliasV6     string       `json:"alias_v6,omitempty"`
	AliasSource string       `json:"alias_source"`
	Warnings    []string     `json:"warnings,omitempty"`
	Families    []planFamily `json:"families"`
}

func newEgressPlanCmd() *cobra.Command {
	var asJSON bool
	var aliasV4, aliasV6 string
	c := &cobra.Command{
		Use:   "plan [CONFIG]",
		Short: "Print the iptables-restore input per family (reads the guest unless --alias-v4 is given)",
		Long: `Print the iptables-restore --noflush input lever would commit, per family, in commit
order (IPv6 first, IPv4 last): the commit that makes OUTPUT's jump first and unique, then
the chain commit. The alias is resolved in the running guest (one read-only guest call);
with --alias-v4 (and optionally --alias-v6) the plan is made offline, assuming a live
chain and one jump copy. Nothing is changed.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configArgFor(cmd, args))
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			var snap guest.Snapshot
			spec := guest.SpecFor(cfg, "")
			online := aliasV4 == ""
			if online {
				b, err := backend.New(cfg)
				if err != nil {
					return &ExitError{Code: 2, Err: err}
				}
				spec = guest.SpecFor(cfg, b.HostAlias())
				snap, err = guest.TakeSnapshot(cmd.Context(), b.Runner(), guest.SnapshotRequest{Alias: spec.Alias, LimaDNS: spec.Lima})
				if err != nil {
					return &ExitError{Code: 2, Err: err}
				}
			} else {
				a4, err := netip.ParseAddr(aliasV4)
				if err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--alias-v4 %q: %w", aliasV4, err)}
				}
				snap.ResolvedV4 = a4
				if aliasV6 != "" {
					a6, err := netip.ParseAddr(aliasV6)
					if err != nil {
						return &ExitError{Code: 2, Err: fmt.Errorf("--alias-v6 %q: %w", aliasV6, err)}
					}
					snap.ResolvedV6 = a6
				}
				jump := []string{egress.JumpRule}
				snap.V4 = egress.FamilyState{ChainExists: true, Output: jump}
				snap.V6 = egress.FamilyState{ChainExists: true, Output: jump}
			}
			d, err := guest.PlanEgress(spec, snap)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			out := planOut{Posture: string(spec.Posture), AliasV4: d.AliasV4, AliasV6: d.AliasV6, AliasSource: d.AliasSource, Warnings: d.Warnings}
			if !online {
				out.AliasSource = "flag"
			}
			for i, f := range egress.Families {
				live := snap.Family(f)
				copies := 0
				for _, r := range live.Output {
					if r == egress.JumpRule {
						copies++
					}
				}
				pf := planFamily{Family: f.String(), Rules: d.Ruleset.Rules(f), JumpRestore: egress.JumpRestore(live.ChainExists, copies), ChainRestore: egress.ChainRestore(d.Ruleset.Rules(f)), CommitOrder: i + 1}
				if online {
					exists := live.ChainExists
					pf.ChainExists, pf.JumpCopiesNow = &exists, &copies
				}
				out.Families = append(out.Families, pf)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, out)
			}
			for _, warn := range out.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "lever: warning: %s\n", warn)
			}
			fmt.Fprintf(w, "# posture %s, alias %s", out.Posture, out.AliasV4)
			if out.AliasV6 != "" {
				fmt.Fprintf(w, " / %s", out.AliasV6)
			}
			fmt.Fprintf(w, " (%s)\n", out.AliasSource)
			for _, pf := range out.Families {
				tool := "iptables-restore"
				if pf.Family == "IPv6" {
					tool = "ip6tables-restore"
				}
				fmt.Fprintf(w, "# %s: jump first and unique (%s --noflush)\n%s", pf.Family, tool, pf.JumpRestore)
			}
			for _, pf := range out.Families {
				tool := "iptables-restore"
				if pf.Family == "IPv6" {
					tool = "ip6tables-restore"
				}
				fmt.Fprintf(w, "# %s: chain commit (%s --noflush)\n%s", pf.Family, tool, pf.ChainRestore)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringVar(&aliasV4, "alias-v4", "", "plan offline with this IPv4 host alias address")
	c.Flags().StringVar(&aliasV6, "alias-v6", "", "plan offline with this IPv6 host alias address (with --alias-v4)")
	return c
}

type applyOut struct {
	guest.Report
	GuestCalls int64 `json:"guest_calls"`
}

func newEgressApplyCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "apply [CONFIG]",
		Short: "Bring the jail up if needed and apply egress, saying whether it verified unchanged or rebuilt",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, b, err := egressTarget(cmd, args)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			ctx := cmd.Context()
			if err := b.EnsureUp(ctx); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("bringing the %s guest up: %w", b.Name(), err)}
			}
			r := &guest.Counting{Inner: b.Runner()}
			rep, err := guest.EnsureEgress(ctx, r, egressSpec(cfg, b))
			out := applyOut{Report: rep, GuestCalls: r.Calls()}
			if err != nil {
				if asJSON {
					_ = writeJSON(cmd.OutOrStdout(), struct {
						applyOut
						Error string `json:"error"`
					}{out, err.Error()})
				}
				return &ExitError{Code: 2, Err: err}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			printApply(cmd.OutOrStdout(), cmd.ErrOrStderr(), out)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printApply(w, errw io.Writer, out applyOut) {
	for _, warn := range out.Desired.Warnings {
		fmt.Fprintf(errw, "lever: warning: %s\n", warn)
	}
	if out.Outcome == guest.Unchanged {
		fmt.Fprintf(w, "egress: verified unchanged (%s posture, alias %s; %d guest call)\n", postureOf(out.Desired), out.Desired.AliasV4, out.GuestCalls)
		return
	}
	fmt.Fprintf(w, "egress: rebuilt (%s posture, alias %s; %d guest calls); it differed:\n", postureOf(out.Desired), out.Desired.AliasV4, out.GuestCalls)
	for _, l := range out.Lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func postureOf(d guest.Desired) string {
	if d.Ruleset.Closed() {
		return "closed"
	}
	return "open"
}

type verifyOut struct {
	Match       bool          `json:"match"`
	Differences []string      `json:"differences"`
	Diff        egress.Diff   `json:"diff"`
	Desired     guest.Desired `json:"desired"`
	LiveClosed  bool          `json:"live_closed"`
}

func newEgressVerifyCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "verify [CONFIG]",
		Short: "Compare the live chains with the desired ruleset rule for rule; exit 0 match, 1 drift, 2 error",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, b, err := egressTarget(cmd, args)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			rep, err := verifyEgress(cmd.Context(), cfg, b)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			out := verifyOut{Match: rep.Diff.Match(), Differences: rep.Diff.Lines(), Diff: rep.Diff, Desired: rep.Desired, LiveClosed: rep.LiveClosedBefore}
			if out.Differences == nil {
				out.Differences = []string{}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(w, out); err != nil {
					return err
				}
			} else {
				for _, warn := range rep.Desired.Warnings {
					fmt.Fprintf(cmd.ErrOrStderr(), "lever: warning: %s\n", warn)
				}
				if out.Match {
					fmt.Fprintln(w, "egress: exact match in both families; the jump is OUTPUT's first and only rule")
				} else {
					fmt.Fprintf(w, "egress: drift\n  %s\n", strings.Join(out.Differences, "\n  "))
				}
			}
			if !out.Match {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// verifyEgress refuses to bring anything up: verify only reads.
func verifyEgress(ctx context.Context, cfg *config.Config, b backend.Backend) (guest.Report, error) {
	rep, err := guest.VerifyEgress(ctx, b.Runner(), egressSpec(cfg, b))
	if err != nil {
		return rep, fmt.Errorf("verifying egress: %w", err)
	}
	return rep, nil
}

// egressSpec is what apply and verify check: the config's egress, the backend's in-guest
// containment check, and the remembered nft round trip (docs/egress.md).
func egressSpec(cfg *config.Config, b backend.Backend) guest.EgressSpec {
	s := backend.Guard(b, guest.SpecFor(cfg, b.HostAlias()))
	s.RoundTrips = guest.FileRoundTrips{Path: filepath.Join(cfg.StateDir(), "guest", "nft-roundtrip")}
	return s
}
