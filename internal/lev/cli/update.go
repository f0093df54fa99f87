package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/update"
	"github.com/lever-jail/lever/internal/version"
)

// updateOptions is `lev update`.
type updateOptions struct {
	JSON bool
}

func newUpdateCmd() *cobra.Command {
	opts := &updateOptions{}
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Check for a newer lev release (LEV_UPDATE_URL overrides the GitHub releases URL); installs nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUpdate(cmdContext(cmd), opts, &update.Checker{Current: version.Version}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the check as JSON")
	return cmd
}

func runUpdate(ctx context.Context, opts *updateOptions, c *update.Checker, stdout io.Writer) error {
	rep, err := c.Check(ctx)
	if err != nil {
		return err
	}
	if opts.JSON {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		// The tag and URL are the peer's words: DEL and C1 go out as \u escapes.
		fmt.Fprintf(stdout, "%s\n", hostterm.EscapeJSON(b))
		return nil
	}
	line := fmt.Sprintf("lev %s; latest release %s", rep.Current, rep.Latest)
	switch {
	case rep.Note != "":
		line += " (" + rep.Note + ")"
	case rep.UpdateAvailable:
		line += ": an update is available"
		if rep.URL != "" {
			line += " at " + rep.URL
		}
	default:
		line += ": up to date"
	}
	fmt.Fprintln(stdout, hostterm.EscapeLine(line))
	return nil
}
