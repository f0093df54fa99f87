package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	_ "github.com/lever-jail/lever/internal/backend/all" // registers every backend
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/hostterm"
)

func newEgressCmd() *cobra.Command {
	c := &cobra.Command{Use: "egress", Short: "Plan, apply and verify the LEVER_EGRESS firewall"}
	c.AddCommand(newEgressPlanCmd(), newEgressApplyCmd(), newEgressVerifyCmd())
	return c
}

// writeJSON prints v as indented JSON. DEL and the C1 controls, which JSON lets a string
// hold raw (a blueprint's name, an error from the jail), are written as \u escapes:
// the same JSON to a script, and nothing a terminal would obey (CSI is U+009B).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(hostterm.EscapeJSON(b.Bytes()))
	return err
}

// egressTarget loads the config and builds its backend.
func egressTarget(cmd *cobra.Command, configPath string) (*config.Config, backend.Backend, error) {
	cfg, err := loadConfig(cmd, configPath)
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, b, nil
}

// egressOptions are what egress apply and verify take.
type egressOptions struct {
	config string
	json   bool
}

type applyOut struct {
	guest.Report
	GuestCalls int64 `json:"guest_calls"`
}

func newEgressApplyCmd() *cobra.Command {
	o := &egressOptions{}
	c := &cobra.Command{
		Use:   "apply",
		Short: "Bring the jail up if needed and apply egress, saying whether it verified unchanged or rebuilt",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.apply(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON")
	return c
}

func (o *egressOptions) apply(cmd *cobra.Command) error {
	cfg, b, err := egressTarget(cmd, o.config)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	spec := egressSpec(cfg, b)
	r := &guest.Counting{Inner: b.Runner()}
	rep, carried, err := ensureEgress(ctx, b, r, spec)
	var ue *upError
	if errors.As(err, &ue) {
		return err
	}
	// a snapshot carried by the backend's own call (Lima's) is one of this apply's calls
	out := applyOut{Report: rep, GuestCalls: r.Calls() + carried}
	if err != nil {
		if o.json {
			_ = writeJSON(cmd.OutOrStdout(), struct {
				applyOut
				Error string `json:"error"`
			}{out, err.Error()})
		}
		return err
	}
	if o.json {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	printApply(cmd.OutOrStdout(), cmd.ErrOrStderr(), out)
	return nil
}

// upError is a failure to bring the guest up: there is no egress verdict to print.
type upError struct {
	backend string
	err     error
}

func (e *upError) Error() string { return "bringing the " + e.backend + " guest up: " + e.err.Error() }
func (e *upError) Unwrap() error { return e.err }

// ensureEgress brings the guest up and makes its egress the desired one. A backend whose
// call after the boot can carry the egress snapshot (bringup.UpSnapshotter: Lima reads its
// facts from it) takes it there, and carried is that one call; the rebuild, when needed,
// is then the only call of r (two when a chainless snapshot's read-back shows OUTPUT
// needs nft's rebuild).
func ensureEgress(ctx context.Context, b backend.Backend, r guest.Runner, spec guest.EgressSpec) (_ guest.Report, carried int64, _ error) {
	if u, ok := b.(bringup.UpSnapshotter); ok {
		req := spec.RebuildRequest()
		secs, err := u.EnsureUpWithSnapshot(ctx, req)
		if err != nil {
			return guest.Report{}, 0, &upError{b.Name(), err}
		}
		if secs != nil {
			snap, err := guest.ParseSnapshot(secs, req)
			if err != nil {
				return guest.Report{}, 1, err
			}
			rep, err := guest.EnsureEgressFrom(ctx, r, spec, snap)
			return rep, 1, err
		}
	} else if err := b.EnsureUp(ctx); err != nil {
		return guest.Report{}, 0, &upError{b.Name(), err}
	}
	rep, err := guest.EnsureEgress(ctx, r, spec)
	return rep, 0, err
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
	o := &egressOptions{}
	c := &cobra.Command{
		Use:   "verify",
		Short: "Compare the live chains with the desired ruleset rule for rule; exit 0 match, 1 drift, 2 error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.verify(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON")
	return c
}

func (o *egressOptions) verify(cmd *cobra.Command) error {
	cfg, b, err := egressTarget(cmd, o.config)
	if err != nil {
		return err
	}
	rep, err := verifyEgress(cmd.Context(), cfg, b)
	if err != nil {
		return err
	}
	out := verifyOut{Match: rep.Diff.Match(), Differences: rep.Diff.Lines(), Diff: rep.Diff, Desired: rep.Desired, LiveClosed: rep.LiveClosedBefore}
	if out.Differences == nil {
		out.Differences = []string{}
	}
	w := cmd.OutOrStdout()
	if o.json {
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
		return exitcode.New(1, nil)
	}
	return nil
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
