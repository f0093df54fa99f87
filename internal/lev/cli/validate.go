package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/readpaths"
)

// validateOptions is `lev validate <agent>`.
type validateOptions struct {
	Agent string
}

func newValidateCmd() *cobra.Command {
	opts := &validateOptions{}
	return &cobra.Command{
		Use:   "validate <agent>",
		Short: "Check a blueprint against your config: errors, and which read paths are granted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Agent = args[0]
			// The report quotes the blueprint (a tree's is the agent's): neutralised, lines kept.
			w := hostterm.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			return runValidate(opts, w)
		},
	}
}

func runValidate(opts *validateOptions, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	bp, err := loadForValidate(opts.Agent)
	if bp == nil && err != nil {
		return err
	}
	if err == nil {
		// What depends on the home (an entry spelling it, or a parent of it,
		// absolutely) is refused here as the run would refuse it.
		err = readpaths.Check(bp.Declared, pipeline.UserHome())
	}
	if err == nil && !bp.Foreign {
		// A foreign blueprint has no install name to check.
		err = blueprint.Install(agentsDir(), bp)
	}
	if err != nil {
		fmt.Fprintf(stdout, "✗ Blueprint '%s' is invalid: %v\n", opts.Agent, err)
		return exitcode.New(1, fmt.Errorf("blueprint %s is invalid", opts.Agent))
	}
	fmt.Fprint(stdout, ValidateReport(bp, cfg))
	return nil
}

// ValidateReport is lev validate's output for a valid blueprint: the checks and
// notes docs/lev.md ("The read-path fence") lists, comparing patterns (not paths on disk) against the config's grants.
func ValidateReport(bp *blueprint.Blueprint, cfg *levconfig.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "✓ Blueprint '%s' is valid.\n", bp.Name)
	fmt.Fprintf(&b, "  %s, version %s\n", plural(len(bp.Order), "stage"), bp.Version)
	// Which file this is, and which per-agent table its grants come from: the install
	// name, not the name inside the file.
	if bp.Foreign {
		fmt.Fprintf(&b, "  file %s, from the run's tree (%s): somebody else's blueprint, it can only tighten: no read-path grant applies, it cannot pre-allow a tool, its sandbox image is ignored\n", bp.File, blueprint.TreeDir)
	} else if bp.Installed != "" {
		fmt.Fprintf(&b, "  file %s, installed as '%s': per-agent grants come from [agent_read_paths.%s]\n", bp.File, bp.Installed, bp.Installed)
	} else {
		fmt.Fprintf(&b, "  file %s, not installed in the agents directory: no [agent_read_paths] table applies, only [security] grants\n", bp.File)
	}
	mcpReport(&b, bp, cfg)
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

// mcpReport says which MCP servers the blueprint declares and whether each may start for
// it (levconfig.ResolveMCP, what a run uses): declaring is not granting.
func mcpReport(b *strings.Builder, bp *blueprint.Blueprint, cfg *levconfig.Config) {
	if len(bp.MCP.Servers) == 0 {
		return
	}
	sts := cfg.ResolveMCP(bp.MCP.Servers, bp.Installed, bp.Foreign)
	var parts, missing []string
	granted := 0
	for _, st := range sts {
		if st.Granted {
			granted++
			cl := st.Config.Classification
			switch cl {
			case "":
				cl = "unclassified: gated as outbound"
			case "outbound":
				cl += ", clearance " + st.Config.Clearance
			}
			parts = append(parts, fmt.Sprintf("%s: granted by %s (%s, %s)", st.Server, st.Why, st.Config.Transport(), cl))
		} else {
			missing = append(missing, st.Server)
			parts = append(parts, fmt.Sprintf("%s: NOT granted (%s)", st.Server, st.Why))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(b, "  WARN MCP servers not granted: %s: their tools will not be offered [mcp-servers-not-granted]\n", quoteList(missing))
	}
	fmt.Fprintf(b, "  NOTE declares MCP servers: %d declared, %d granted [mcp-servers-declared]\n", len(sts), granted)
	for _, p := range parts {
		fmt.Fprintf(b, "       %s\n", p)
	}
}

// loadForValidate finds a blueprint the way lev run does: the agents directory, else the
// tree of the current directory (as the run's workdir), else a path. A nil blueprint with
// an error is "not found" (exit 2); a blueprint with an error is invalid (exit 1).
func loadForValidate(agent string) (*blueprint.Blueprint, error) {
	file, err := blueprint.Find(agentsDir(), agent)
	pathLike := strings.HasSuffix(agent, ".toml") || strings.ContainsRune(agent, '/')
	if err == nil && !pathLike {
		bp, perr := blueprint.Load(file, pipeline.Known)
		if perr != nil {
			return &blueprint.Blueprint{}, perr
		}
		return bp, nil
	}
	wd, werr := os.Getwd()
	if werr != nil {
		return nil, werr
	}
	if err != nil {
		if pathLike {
			return nil, err
		}
		tf, terr := blueprint.TreeFile(wd, agent)
		if terr != nil {
			return nil, err
		}
		if _, lerr := os.Lstat(tf); lerr != nil {
			return nil, fmt.Errorf("%w, nor in the tree (%s)", err, tf)
		}
		file = tf
	}
	if !inTree(file, wd) {
		bp, perr := blueprint.Load(file, pipeline.Known)
		if perr != nil {
			return &blueprint.Blueprint{}, perr
		}
		return bp, nil
	}
	data, err := blueprint.ReadTree(wd, file)
	if err != nil {
		return &blueprint.Blueprint{}, err
	}
	bp, err := blueprint.Parse(file, data, pipeline.Known)
	if err != nil {
		return &blueprint.Blueprint{}, err
	}
	blueprint.MakeForeign(bp)
	return bp, nil
}

// inTree reports whether file is in the tree of wd, as written or once symlinks are
// resolved: either way it is somebody else's, read through ReadTree's checks and made
// foreign, never trusted as a path the user named.
func inTree(file, wd string) bool {
	if af, err := filepath.Abs(file); err == nil && fspath.Within(wd, af) {
		return true
	}
	rf, err := filepath.EvalSymlinks(file)
	if err != nil {
		return true // let ReadTree say what is wrong with it
	}
	rw, err := filepath.EvalSymlinks(wd)
	if err != nil {
		return false
	}
	return fspath.Within(rw, rf)
}
