package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/policy"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// policyOptions is what every `lev policy` subcommand shares: which policy file.
type policyOptions struct {
	Path string // --policy; "" means the file live runs use
}

// file is the policy file the subcommand acts on.
func (o *policyOptions) file() (string, error) {
	if o.Path != "" {
		return o.Path, nil
	}
	return policy.DefaultPath()
}

// newPolicyCmd builds `lev policy` (list, add, test).
func newPolicyCmd() *cobra.Command {
	opts := &policyOptions{}
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show, extend and dry-run the taint policy",
		Long: `The taint policy decides what happens when an outbound tool (shell, web_search,
web_fetch, the HTTP tools, submit_output, any unclassified MCP or script tool) is about to
carry data more sensitive than its clearance: allow, deny, or ask.`,
		SilenceUsage: true,
	}
	cmd.PersistentFlags().StringVar(&opts.Path, "policy", "", "policy file (default: the one live runs use: $LEV_POLICY, else config.toml [security] policy_file, else $LEV_HOME/policy.toml, ~/.leviath/policy.toml)")
	cmd.AddCommand(newPolicyListCmd(opts), newPolicyAddCmd(opts), newPolicyTestCmd(opts))
	return cmd
}

func newPolicyListCmd(opts *policyOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the outbound tools' clearances, the allowlist and the rules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPolicyList(opts, cmd.OutOrStdout())
		},
	}
}

func runPolicyList(opts *policyOptions, stdout io.Writer) error {
	f, err := opts.file()
	if err != nil {
		return err
	}
	p, err := policy.Load(f)
	if err != nil {
		return err
	}
	return p.List(stdout)
}

// policyAddOptions is `lev policy add TOOL`.
type policyAddOptions struct {
	*policyOptions
	Tool, Target, MaxSensitivity string
}

func newPolicyAddCmd(parent *policyOptions) *cobra.Command {
	opts := &policyAddOptions{policyOptions: parent}
	c := &cobra.Command{
		Use:   "add <tool> --target PATTERN --max-sensitivity LEVEL",
		Short: "Add an allowlist entry",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Tool = args[0]
			return runPolicyAdd(opts, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&opts.Target, "target", "", `target pattern, * globs (e.g. "*.example.com"); empty matches any target`)
	c.Flags().StringVar(&opts.MaxSensitivity, "max-sensitivity", "", "highest label the tool may carry there: public, internal or private")
	_ = c.MarkFlagRequired("max-sensitivity")
	return c
}

func runPolicyAdd(opts *policyAddOptions, stdout io.Writer) error {
	f, err := opts.file()
	if err != nil {
		return err
	}
	idx, err := policy.AddAllow(f, policy.AllowEntry{Tool: opts.Tool, Target: opts.Target, MaxSensitivity: opts.MaxSensitivity})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "added allow[%d] to %s: %s may send up to %s to %q\n",
		idx, f, opts.Tool, strings.ToLower(opts.MaxSensitivity), policy.DisplayTarget(opts.Target))
	return nil
}

// policyTestOptions is `lev policy test TOOL`.
type policyTestOptions struct {
	*policyOptions
	Tool, Target, Taint string
	JSON                bool
}

func newPolicyTestCmd(parent *policyOptions) *cobra.Command {
	opts := &policyTestOptions{policyOptions: parent}
	c := &cobra.Command{
		Use:   "test <tool> --target T [--taint LEVEL]",
		Short: "Dry-run the taint gate for one call and say why",
		Long: `Runs the gate's own decision code for one call, as interactive, headless and --yolo runs
would see it, without running anything. --taint defaults to private: what the tool would do
with data read through a granted read path.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Tool = args[0]
			return runPolicyTest(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&opts.Target, "target", "", "the call's target: host for web/HTTP and MCP tools (a URL is read as the live gate reads a url argument), command line for shell")
	c.Flags().StringVar(&opts.Taint, "taint", "private", "label of the data in context: public, internal or private")
	c.Flags().BoolVar(&opts.JSON, "json", false, "print the audit records each mode would write")
	return c
}

func runPolicyTest(ctx context.Context, opts *policyTestOptions, stdout io.Writer) error {
	f, err := opts.file()
	if err != nil {
		return err
	}
	// Built as live runs build it: config.toml's [taint_tracking] and MCP classification.
	p, note, err := policy.LoadAsLive(f)
	if err != nil {
		return err
	}
	l, err := taint.ParseLevel(opts.Taint)
	if err != nil {
		return fmt.Errorf("--taint: %w", err)
	}
	res, err := p.DryRun(ctx, opts.Tool, opts.Target, l)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(stdout, res, true)
	}
	res.Print(stdout)
	if note != "" {
		fmt.Fprintln(stdout, note)
	}
	return nil
}
