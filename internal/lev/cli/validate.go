package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/readpaths"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate <agent>",
		Short: "Check a blueprint against your config: errors, and which read paths are granted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			file, err := blueprint.Find(agentsDir(), args[0])
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			bp, err := blueprint.Load(file, pipeline.Known)
			if err == nil {
				// What depends on the home (an entry spelling it, or a parent of it,
				// absolutely) is refused here as the run would refuse it.
				err = readpaths.Check(bp.Declared, pipeline.UserHome())
			}
			if err != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "✗ Blueprint '%s' is invalid: %v\n", args[0], err)
				return &ExitError{Code: 1, Err: fmt.Errorf("blueprint %s is invalid", args[0])}
			}
			if err := blueprint.Install(agentsDir(), bp); err != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "✗ Blueprint '%s' is invalid: %v\n", args[0], err)
				return &ExitError{Code: 1, Err: fmt.Errorf("blueprint %s is invalid", args[0])}
			}
			fmt.Fprint(cmd.OutOrStdout(), ValidateReport(bp, cfg))
			return nil
		},
	}
}

// ValidateReport is lev validate's output for a valid blueprint: the spec's checks and
// notes, comparing patterns (not paths on disk) against the config's grants.
func ValidateReport(bp *blueprint.Blueprint, cfg *levconfig.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "✓ Blueprint '%s' is valid.\n", bp.Name)
	fmt.Fprintf(&b, "  %s, version %s\n", plural(len(bp.Order), "stage"), bp.Version)
	// Which file this is, and which per-agent table its grants come from: the install
	// name, not the name inside the file.
	if bp.Installed != "" {
		fmt.Fprintf(&b, "  file %s, installed as '%s': per-agent grants come from [agent_read_paths.%s]\n", bp.File, bp.Installed, bp.Installed)
	} else {
		fmt.Fprintf(&b, "  file %s, not installed in the agents directory: no [agent_read_paths] table applies, only [security] grants\n", bp.File)
	}
	if len(bp.Declared) == 0 {
		return b.String()
	}
	sts := pipeline.ResolveGrants(bp, cfg)
	var missing, parts, by []string
	granted := 0
	for _, s := range sts {
		if s.Granted {
			granted++
			parts = append(parts, s.Entry.Raw+": granted")
			by = append(by, s.Entry.Raw+" by "+s.By)
		} else {
			missing = append(missing, s.Entry.Raw)
			parts = append(parts, s.Entry.Raw+": NOT granted")
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "  WARN your config does not grant %s: reads matching them will be refused [read-paths-not-granted]\n", quoteList(missing))
		fmt.Fprintf(&b, "       add to your config.toml: %s\n", readpaths.GrantLine(bp.Installed, missing))
	}
	fmt.Fprintf(&b, "  NOTE declares [read_paths] (reads outside the run workdir): %d declared, %d granted [read-paths-declared]\n", len(sts), granted)
	fmt.Fprintf(&b, "       %s\n", strings.Join(parts, "; "))
	if len(by) > 0 {
		fmt.Fprintf(&b, "  NOTE grants given to %s: %s [read-paths-granted]\n", bp.File, strings.Join(by, "; "))
	}
	return b.String()
}
