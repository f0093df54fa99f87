package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	_ "github.com/lever-jail/lever/internal/backend/all" // registers every backend
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
)

// bringupTarget loads the config and derives the bring-up instance.
func bringupTarget(cmd *cobra.Command, args []string, fresh bool) (*bringup.Instance, error) {
	cfg, err := config.Load(configArgFor(cmd, args))
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	in, err := bringup.New(bringup.Options{Cfg: cfg, Backend: b, Exe: exe, Out: cmd.OutOrStdout(), Fresh: fresh})
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	return in, nil
}

func applyRun(cmd *cobra.Command, args []string, dryRun, fresh, asJSON bool) (*bringup.Instance, *bringup.Result, error) {
	in, err := bringupTarget(cmd, args, fresh)
	if err != nil {
		return nil, nil, err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	if dryRun {
		// The same observation Execute starts from (one guest call), and the same table.
		plan := in.Plan(in.ObserveWithEgress(ctx))
		if asJSON {
			return in, nil, writeJSON(cmd.OutOrStdout(), plan)
		}
		bringup.PrintPlan(cmd.OutOrStdout(), plan)
		return in, nil, nil
	}
	res, err := in.Execute(ctx)
	if err != nil {
		return in, res, err
	}
	if asJSON {
		return in, res, writeJSON(cmd.OutOrStdout(), res)
	}
	return in, res, nil
}

func newApplyCmd() *cobra.Command {
	var dryRun, fresh, asJSON bool
	c := &cobra.Command{
		Use:   "apply [CONFIG]",
		Short: "Bring the jail up headless: backend, egress, provisioning, broker, lev",
		Long: `Bring the jail up in the spec's order: the guest, the egress firewall (verified rule
for rule, rebuilt on any drift, before anything else starts), guest provisioning (skipped
when the root-owned stamp names these scripts and this boot), the run user's podman
service, the broker (IP SAN from the resolved alias), in-guest enrolment of every agent,
the lev image (built from the static lev binary, no registry), and the lev containers.
A second run on a healthy jail changes nothing and says so. --dry-run prints the plan.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, _, err := applyRun(cmd, args, dryRun, fresh, asJSON)
			return err
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	c.Flags().BoolVar(&fresh, "fresh", false, "recreate the lev containers (discards the manager's conversation; needed to add or drop /dev/kvm)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result (or plan) as JSON")
	return c
}

func newUpCmd() *cobra.Command {
	var dryRun, fresh bool
	c := &cobra.Command{
		Use:   "up [CONFIG]",
		Short: "apply, then show the jail's status",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, res, err := applyRun(cmd, args, dryRun, fresh, false)
			if err != nil || dryRun {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), in.StatusAfter(cmd.Context(), res).Text())
			return nil
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	c.Flags().BoolVar(&fresh, "fresh", false, "recreate the lev containers")
	return c
}

func newStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [CONFIG]",
		Short: "Show guest, egress (verified or drifted), broker and container state; exit 1 when unhealthy",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := bringupTarget(cmd, args, false)
			if err != nil {
				return err
			}
			st := in.Status(cmd.Context())
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), st); err != nil {
					return err
				}
			} else {
				fmt.Fprint(cmd.OutOrStdout(), st.Text())
			}
			if !st.Healthy {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
