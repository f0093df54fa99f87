package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/toolstamp"
)

// toolsOptions is `lev tools`.
type toolsOptions struct {
	Workdir string
	JSON    bool
}

func newToolsCmd() *cobra.Command {
	opts := &toolsOptions{}
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List the scripts install_tool put in the workdir's .lev/tools, each checked against its stamp",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTools(opts, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&opts.Workdir, "workdir", "", "the run's workdir (default: the current directory)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the list as a JSON array")
	return cmd
}

// toolRow is one installed script and what its stamp says.
type toolRow struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // verified | TAMPERED | UNSTAMPED | unreadable
	Run     string `json:"run,omitempty"`
	Workdir string `json:"workdir,omitempty"`
	Time    string `json:"time,omitempty"`
	Error   string `json:"error,omitempty"`
}

// listTools reads <workdir>/.lev/tools. Only regular files are read (a symlink or a FIFO
// there is listed as unreadable, never followed or opened).
func listTools(workdir string) ([]toolRow, error) {
	dir := filepath.Join(workdir, filepath.FromSlash(toolstamp.Dir))
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var rows []toolRow
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), toolstamp.Ext)
		if !ok {
			continue
		}
		row := toolRow{Name: name}
		if !e.Type().IsRegular() {
			row.Status, row.Error = "unreadable", "not a regular file"
			rows = append(rows, row)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			row.Status, row.Error = "unreadable", err.Error()
			rows = append(rows, row)
			continue
		}
		st, verr := toolstamp.Verify(data)
		switch {
		case verr == nil:
			row.Status = "verified"
		case errors.Is(verr, toolstamp.ErrTampered):
			row.Status, row.Error = "TAMPERED", verr.Error()
		default:
			row.Status, row.Error = "UNSTAMPED", verr.Error()
		}
		if st.Run != "" {
			row.Run, row.Workdir, row.Time = st.Run, st.Workdir, st.Time.UTC().Format("2006-01-02 15:04:05")
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

func runTools(opts *toolsOptions, stdout io.Writer) error {
	wd := opts.Workdir
	if wd == "" {
		var err error
		if wd, err = os.Getwd(); err != nil {
			return err
		}
	}
	rows, err := listTools(wd)
	if err != nil {
		return err
	}
	if opts.JSON {
		if rows == nil {
			rows = []toolRow{}
		}
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", hostterm.EscapeJSON(b))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSTATUS\tRUN\tINSTALLED\tWORKDIR")
	for _, r := range rows {
		// Names, runs and workdirs come from files an agent wrote: one cell each, neutralised.
		cells := []string{r.Name, r.Status, r.Run, r.Time, r.Workdir}
		for i, c := range cells {
			if c == "" {
				c = "-"
			}
			cells[i] = hostterm.EscapeLine(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}
