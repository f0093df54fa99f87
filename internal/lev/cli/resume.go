package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/daemon"
)

// resumeOptions is `lev resume <run>`.
type resumeOptions struct {
	Run                    string
	Detach, Headless, JSON bool
}

func newResumeCmd() *cobra.Command {
	opts := &resumeOptions{}
	cmd := &cobra.Command{
		Use:   "resume <run>",
		Short: "Resume a run that was refused or failed, under the config in force now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Run = args[0]
			return runResume(cmdContext(cmd), opts, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&opts.Detach, "detach", false, "return without waiting")
	cmd.Flags().BoolVar(&opts.Headless, "headless", false, "do not ask on the terminal: ask prompts are refusals")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print every event as a JSON line on stdout")
	return cmd
}

func runResume(ctx context.Context, opts *resumeOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	c, err := connect(ctx, cfg, true, stderr)
	if err != nil {
		return err
	}
	interactive := !opts.Headless && !opts.Detach && isTerminal(stdin)
	rec, err := c.Resume(ctx, opts.Run, interactive)
	if err != nil {
		var ae *daemon.APIError
		if errors.As(err, &ae) && ae.Code == 404 {
			return runErr(opts.Run, err)
		}
		return fmt.Errorf("resuming %s: %w", opts.Run, err)
	}
	fmt.Fprintf(stderr, "lev: resumed run %s at stage %d\n", rec.ID, rec.Stage)
	warnUngranted(stderr, rec)
	if opts.Detach {
		return nil
	}
	var p *prompter
	if interactive {
		p = &prompter{c: c, in: bufio.NewReader(stdin), out: stderr}
	}
	return follow(ctx, c, p, rec, opts.JSON, stdout, stderr)
}
