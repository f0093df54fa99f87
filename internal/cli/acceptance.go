package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/exitcode"
)

type acceptanceOptions struct {
	config  string
	json    bool
	out     string
	targets acceptance.Targets
}

func newAcceptanceCmd() *cobra.Command {
	o := &acceptanceOptions{targets: acceptance.DefaultTargets()}
	t := &o.targets
	c := &cobra.Command{
		Use:   "acceptance",
		Short: "Prove the jail's properties from inside it; exit 1 if any check fails",
		Long: `Run lever's acceptance checks from inside the jail: the live LEVER_EGRESS chains match
the desired ruleset exactly in both families; the metadata address answers "no route to
host" at once while a neighbouring link-local address is dropped; a private-range address
is dropped; each allowlisted alias port is reachable and the broker's admin port is not;
the broker's certificate validates when dialed by IP and a client without a certificate is
refused; in the closed posture DNS and the public internet are unreachable; loopback
works; lev's containers are rootless, without capabilities, with no_new_privs, in the
jail's network namespace, with their pids and memory limits in force; the API key is
nowhere in the guest. The addresses that stand for the internet and the LAN come from
flags. Writes a Markdown report (or --json).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "write the report as JSON")
	c.Flags().StringVar(&o.out, "out", "", "write the report to this file instead of stdout")
	c.Flags().StringVar(&t.Metadata, "metadata", t.Metadata, "the cloud metadata address:port (must be REJECTed)")
	c.Flags().StringVar(&t.LinkLocal, "link-local", t.LinkLocal, "a neighbouring link-local address:port (must be dropped)")
	c.Flags().StringVar(&t.AliasV6, "alias-v6", t.AliasV6, "judge and probe this IPv6 address as the host alias's (default: what the alias resolves to in the guest)")
	c.Flags().StringVar(&t.LAN, "lan", t.LAN, "a private-range address:port standing for the LAN (must be dropped)")
	c.Flags().StringVar(&t.Internet, "internet", t.Internet, "an address:port standing for the public internet (closed posture: must be dropped)")
	c.Flags().StringVar(&t.DNS, "dns", t.DNS, "a resolver address:port standing for public DNS (closed posture: must be unreachable)")
	return c
}

func (o *acceptanceOptions) run(cmd *cobra.Command) error {
	in, _, err := bringupTarget(cmd, o.config, false)
	if err != nil {
		return err
	}
	rep, err := in.Acceptance(cmd.Context(), o.targets)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if o.json {
		err = writeJSON(w, rep)
	} else {
		_, err = fmt.Fprint(w, rep.Markdown())
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		return exitcode.New(1, fmt.Errorf("acceptance failed: %v", rep.Failed()))
	}
	return nil
}
