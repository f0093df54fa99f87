package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/doctor"
	"github.com/lever-jail/lever/internal/exitcode"
)

type doctorOptions struct {
	config string
	json   bool
}

func newDoctorCmd() *cobra.Command {
	o := &doctorOptions{}
	c := &cobra.Command{
		Use:   "doctor [CONFIG]",
		Short: "Check the host's prerequisites (backends, KVM, qemu, podman, disk, broker certificates, a running jail's drift, leftovers), each with its fix; exit 1 on a blocker",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.config = configArgFor(cmd, args)
			return o.run(cmd, len(args) > 0 || cmd.Flags().Changed("config"))
		},
	}
	c.Flags().BoolVar(&o.json, "json", false, "print JSON (schema 1)")
	return c
}

// run gathers the jail's facts the way lever status does (when there is a lever.yaml) and
// hands everything to doctor. named: the config was given, so a missing file is an error
// rather than "no jail here".
func (o *doctorOptions) run(cmd *cobra.Command, named bool) error {
	p := doctor.HostProbe{Cfg: doctor.Config{Path: o.config}}
	if _, err := os.Stat(o.config); err == nil || named {
		p.Cfg.Found = true
		// read as lever status reads it (the same refusals)
		cfg, _, err := loadWith(cmd, o.config, config.Parse)
		if err != nil {
			p.Cfg.Err = err.Error()
		} else {
			p.Cfg.Name, p.Cfg.Backend, p.Cfg.StateDir = cfg.Name, cfg.Backend, cfg.StateDir()
			p.CAFunc = func(dir string) doctor.Cert { return doctor.ReadCert(brokerctl.CAPath(dir)) }
			p.BrokerFunc = func(dir string) doctor.Broker {
				st, err := brokerctl.Status(dir)
				if err != nil {
					return doctor.Broker{Err: err.Error()}
				}
				b := doctor.Broker{Running: st.Running}
				if st.State != nil {
					b.CertNotAfter = st.State.ServerCertNotAfter
				}
				return b
			}
			p.JailFunc = func(ctx context.Context) *doctor.Jail {
				in, _, err := bringupTarget(cmd, o.config, false)
				if err != nil {
					return &doctor.Jail{Err: err.Error()}
				}
				s := in.Status(ctx)
				return &doctor.Jail{Reachable: s.Guest.Reachable, Verified: s.Egress.Verified, Differences: s.Egress.Differences,
					EgressErr: s.Egress.Error, Healthy: s.Healthy}
			}
		}
	}
	r := doctor.Run(cmd.Context(), p)
	var err error
	if o.json {
		err = writeJSON(cmd.OutOrStdout(), r)
	} else {
		_, err = fmt.Fprint(cmd.OutOrStdout(), r.Text())
	}
	if err != nil {
		return err
	}
	if r.Blockers > 0 {
		return exitcode.New(1, nil)
	}
	return nil
}
