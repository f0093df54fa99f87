package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
		Use:   "doctor",
		Short: "Check the host's prerequisites (backends, KVM, qemu, podman, disk, broker certificates, a running jail's drift, leftovers), each with its fix; exit 1 on a blocker",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON (schema 1)")
	return c
}

// run finds the jail's lever.yaml as every jail command does (-c, else the upward search),
// gathers the jail's facts the way lever status does, and hands everything to doctor.
// Without -c and with no lever.yaml above, the host's checks still run (doctor is for a
// machine that has no jail yet too); a -c file that is not there is bad input (exit 2).
func (o *doctorOptions) run(cmd *cobra.Command) error {
	p := doctor.HostProbe{Cfg: doctor.Config{Path: configFileName}}
	path := o.config
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("lever.yaml given with -c: %w", err)
		}
	} else if wd, err := os.Getwd(); err == nil && configAbove(wd) {
		path, err = configPath("")
		if err != nil {
			p.Cfg.Found, p.Cfg.Err = true, err.Error()
		}
	}
	if path != "" {
		p.Cfg.Path, p.Cfg.Found = path, true
		// read as lever status reads it (the same refusals)
		cfg, _, err := loadWith(cmd, path, config.Parse)
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
				in, _, err := bringupTarget(cmd, path, false)
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

// configAbove says whether dir or a directory above it holds a lever.yaml (of anyone's:
// configPath then decides whether it may be taken).
func configAbove(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, configFileName)); err == nil {
			return true
		}
		if filepath.Dir(d) == d {
			return false
		}
	}
}
