package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/daemon"
)

func newResumeCmd() *cobra.Command {
	var detach, headless, asJSON bool
	cmd := &cobra.Command{
		Use:   "resume <run>",
		Short: "Resume a run that was refused or failed, under the config in force now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			c, err := connect(ctx, cfg, true, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			interactive := !headless && !detach && hostterm.IsTerminal(os.Stdin)
			rec, err := c.Resume(ctx, args[0], interactive)
			if err != nil {
				var ae *daemon.APIError
				if errors.As(err, &ae) && ae.Code == 404 {
					return runErr(args[0], err)
				}
				return fmt.Errorf("resuming %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "lev: resumed run %s at stage %d\n", rec.ID, rec.Stage)
			warnUngranted(cmd.ErrOrStderr(), rec)
			if detach {
				return nil
			}
			var p *prompter
			if interactive {
				p = &prompter{c: c, in: bufio.NewReader(os.Stdin), out: cmd.ErrOrStderr()}
			}
			return follow(ctx, c, p, rec, asJSON, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&detach, "detach", false, "return without waiting")
	cmd.Flags().BoolVar(&headless, "headless", false, "do not ask on the terminal: ask prompts are refusals")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print every event as a JSON line on stdout")
	return cmd
}
