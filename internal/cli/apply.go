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
	"github.com/lever-jail/lever/internal/exitcode"
)

// bringupTarget loads the config and derives the bring-up instance; keep makes the
// config's bytes lever's copy of what it brought up (keepConfig), for a bring-up to call
// once agents may run on them. The broker it starts reads the file again and must find the
// same bytes (configDigestEnv).
func bringupTarget(cmd *cobra.Command, configPath string, fresh bool) (in *bringup.Instance, keep func() error, err error) {
	cfg, data, err := loadWith(cmd, configPath, config.Parse)
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	in, err = bringup.Load(ctx(cmd), bringup.Options{Cfg: cfg, Backend: b, Exe: exe, Out: cmd.OutOrStdout(), Fresh: fresh,
		BrokerEnv: configDigest(cfg, data)})
	return in, func() error { return keepConfig(cfg, data) }, err
}

// applyOptions are what apply and up take.
type applyOptions struct {
	config              string
	dryRun, fresh, json bool
	// yes confirms the config's grants without asking (trust.go).
	yes bool
}

// run is apply: the plan with --dry-run, else the bring-up.
func (o *applyOptions) run(cmd *cobra.Command) (*bringup.Instance, *bringup.Result, error) {
	in, keep, err := bringupTarget(cmd, o.config, o.fresh)
	if err != nil {
		return nil, nil, err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	if err := checkKeyFile(in.Config()); err != nil {
		return in, nil, err
	}
	if o.dryRun {
		plan := in.DryRun(ctx)
		if o.json {
			return in, nil, writeJSON(cmd.OutOrStdout(), plan)
		}
		bringup.PrintPlan(cmd.OutOrStdout(), plan)
		printGrants(cmd.OutOrStdout(), in.Config())
		return in, nil, nil
	}
	if err := confirmGrants(cmd, in.Config(), o.yes); err != nil {
		return in, nil, err
	}
	res, err := in.Execute(ctx)
	// The copy is what the agents run on: kept after a bring-up that reached the lev step
	// (the image step done), failed or not, and only then. A first up that failed earlier
	// keeps nothing, so the person's fix to lever.yaml needs no --accept-config.
	if err == nil || reached(res, bringup.StepImage) {
		if kerr := keep(); kerr != nil && err == nil {
			err = kerr
		}
	}
	if err != nil {
		return in, res, err
	}
	if o.json {
		return in, res, writeJSON(cmd.OutOrStdout(), res)
	}
	return in, res, nil
}

func newApplyCmd() *cobra.Command {
	o := &applyOptions{}
	c := &cobra.Command{
		Use:   "apply",
		Short: "Bring the jail up headless: backend, egress, provisioning, broker, lev",
		Long: `Bring the jail up in the order docs/bringup.md gives: the guest, the egress firewall
(verified rule for rule, rebuilt on any drift, before anything else starts), guest
provisioning (skipped when the root-owned stamp names these scripts and this boot), the
run user's podman service, the broker (IP SAN from the resolved alias), in-guest
enrolment of every agent, the lev image (built from the static lev binary, no registry),
and the lev containers. A second run on a healthy jail changes nothing and says so.
--dry-run prints the plan and what the config grants the jail (key file, upstream,
llm_routes, egress, allowed ports). The first bring-up of a config asks to confirm those
grants on a terminal ([y/N]; --yes confirms for scripts), and asks again when they change.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, _, err := o.run(cmd)
			return err
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	c.Flags().BoolVar(&o.fresh, "fresh", false, "recreate the lev containers (discards the manager's conversation; needed to add or drop /dev/kvm)")
	c.Flags().BoolVar(&o.json, "json", false, "print the result (or plan) as JSON")
	c.Flags().BoolVar(&o.yes, "yes", false, "confirm the config's grants (key file, upstream, routes, egress, ports) without asking")
	return c
}

func newUpCmd() *cobra.Command {
	o := &applyOptions{}
	c := &cobra.Command{
		Use:   "up",
		Short: "apply, then show the jail's status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, res, err := o.run(cmd)
			if err != nil || o.dryRun {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), in.StatusAfter(cmd.Context(), res).Text())
			return nil
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	c.Flags().BoolVar(&o.fresh, "fresh", false, "recreate the lev containers")
	c.Flags().BoolVar(&o.yes, "yes", false, "confirm the config's grants (key file, upstream, routes, egress, ports) without asking")
	return c
}

type statusOptions struct {
	config string
	json   bool
}

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	c := &cobra.Command{
		Use:   "status",
		Short: "Show guest, egress (verified or drifted), broker and container state; exit 1 when unhealthy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON")
	return c
}

func (o *statusOptions) run(cmd *cobra.Command) error {
	in, _, err := bringupTarget(cmd, o.config, false)
	if err != nil {
		return err
	}
	st := in.Status(cmd.Context())
	if o.json {
		if err := writeJSON(cmd.OutOrStdout(), st); err != nil {
			return err
		}
	} else {
		fmt.Fprint(cmd.OutOrStdout(), st.Text())
	}
	if !st.Healthy {
		return exitcode.New(1, nil)
	}
	return nil
}

// reached says whether a bring-up's result has step id among its finished steps.
func reached(res *bringup.Result, id string) bool {
	if res == nil {
		return false
	}
	for _, st := range res.Steps {
		if st.ID == id {
			return true
		}
	}
	return false
}
