package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/readpaths"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// runOptions is `lev run [agent]`.
type runOptions struct {
	Spec runner.Spec
	// Named is set when an agent argument was given, even an empty one: only a missing
	// argument falls back to $LEV_BLUEPRINT.
	Named                  bool
	Detach, Headless, JSON bool
}

func newRunCmd() *cobra.Command {
	opts := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [agent]",
		Short: "Spawn a run on the daemon (starting it if needed) and wait for its result",
		Long: `Spawn a run on the daemon (starting it if needed) and wait for its result.

The agent is a blueprint name or a path to its .toml file. Without one, $LEV_BLUEPRINT is
used: inside a lever jail it names lever.yaml's lev.blueprint.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Spec.Agent, opts.Named = args[0], true
			}
			return runRun(cmdContext(cmd), opts, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&opts.Spec.Workdir, "workdir", "", "the run's workdir (default: the current directory)")
	cmd.Flags().BoolVar(&opts.Spec.Yolo, "yolo", false, "run unattended: every ask permission becomes allow (deny stays deny)")
	cmd.Flags().StringArrayVar(&opts.Spec.Allow, "allow", nil, "turn this tool's ask permission into allow (repeatable; never lifts deny)")
	cmd.Flags().StringVar(&opts.Spec.Input, "input", "", "the task, appended to the first stage's prompt")
	cmd.Flags().BoolVar(&opts.Detach, "detach", false, "print the run id and return without waiting")
	cmd.Flags().BoolVar(&opts.Headless, "headless", false, "do not ask on the terminal: ask permissions are refusals")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print every event as a JSON line on stdout (instead of readable lines on stderr and the result on stdout)")
	return cmd
}

func runRun(ctx context.Context, opts *runOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	spec := opts.Spec
	if !opts.Named {
		if spec.Agent = os.Getenv("LEV_BLUEPRINT"); spec.Agent == "" {
			return fmt.Errorf("lev run: name an agent (a blueprint name or .toml path), or set LEV_BLUEPRINT")
		}
	}
	if strings.HasSuffix(spec.Agent, ".toml") || strings.ContainsRune(spec.Agent, '/') {
		// The daemon resolves names from its own directory, not ours.
		if spec.Agent, err = filepath.Abs(spec.Agent); err != nil {
			return err
		}
	}
	if spec.Workdir == "" {
		spec.Workdir, _ = os.Getwd()
	}
	if spec.Workdir, err = filepath.Abs(spec.Workdir); err != nil {
		return err
	}
	// Somebody is there to answer ask prompts when stdin is a terminal.
	spec.Interactive = !opts.Headless && !opts.Detach && isTerminal(stdin)
	c, err := connect(ctx, cfg, true, stderr)
	if err != nil {
		return err
	}
	rec, err := c.Spawn(ctx, spec)
	if err != nil {
		return fmt.Errorf("spawning %s: %w", spec.Agent, err)
	}
	// The agent's name can be a tree blueprint's (the agent's side): one line, neutralised.
	fmt.Fprintln(stderr, hostterm.EscapeLine(fmt.Sprintf("lev: run %s of %s in %s", rec.ID, rec.Agent, rec.Workdir)))
	warnUngranted(stderr, rec)
	if opts.Detach {
		fmt.Fprintln(stdout, rec.ID)
		return nil
	}
	var p *prompter
	if spec.Interactive {
		p = &prompter{c: c, in: bufio.NewReader(stdin), out: stderr}
	}
	return follow(ctx, c, p, rec, opts.JSON, stdout, stderr)
}

// isTerminal is hostterm's question asked of stdin: only a file can be a terminal.
func isTerminal(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	return ok && hostterm.IsTerminal(f)
}

// warnUngranted surfaces declared-but-ungranted read paths before the run hits them. The
// entries and the name are the blueprint's, a tree's one included: each line neutralised.
func warnUngranted(w io.Writer, rec *runner.Record) {
	var missing []string
	for _, s := range rec.ReadPaths {
		if !s.Granted {
			missing = append(missing, s.Entry)
		}
	}
	if len(missing) == 0 {
		return
	}
	say := func(format string, a ...any) {
		fmt.Fprintln(w, hostterm.EscapeLine(fmt.Sprintf(format, a...)))
	}
	if rec.Admission != nil && rec.Admission.Origin == blueprint.OriginTree {
		say("lev: WARN %s is a blueprint from the tree (%s): it gets no read-path grant, so reads of %s will be refused; install it in the agents directory to grant them", rec.Agent, blueprint.TreeDir, strings.Join(missing, ", "))
		return
	}
	say("lev: WARN your config does not grant %s: reads matching them will be refused [read-paths-not-granted]", strings.Join(missing, ", "))
	key := rec.Agent
	if strings.ContainsRune(key, '/') {
		key = "" // run by its path: no install name, no per-agent table
	}
	say("       add to your config.toml: %s", readpaths.GrantLine(key, missing))
}
