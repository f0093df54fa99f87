package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	_ "github.com/lever-jail/lever/internal/backend/all" // registers every backend
)

// probeTimeout bounds each backend's probe (a tool's --version); probes run in parallel.
const probeTimeout = 20 * time.Second

// matrixRow is one backend's row of `lever backends`: what it guarantees (its Profile)
// and whether it can be used on this host now.
type matrixRow struct {
	backend.Profile
	Guarantee0 string               `json:"guarantee_0"`
	Available  backend.Availability `json:"available"`
}

type matrixOut struct {
	Backends []matrixRow `json:"backends"`
}

// buildMatrix makes one row per descriptor, probing the host for each in parallel.
func buildMatrix(ctx context.Context, descs []backend.Descriptor) matrixOut {
	rows := make([]matrixRow, len(descs))
	var wg sync.WaitGroup
	for i, d := range descs {
		rows[i] = matrixRow{Profile: d.Profile, Guarantee0: guarantee0(d.Profile)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			rows[i].Available = d.Probe(pctx)
		}()
	}
	wg.Wait()
	return matrixOut{Backends: rows}
}

func guarantee0(p backend.Profile) string {
	if p.HypervisorBoundary {
		return "holds: a hypervisor boundary separates the agents from the host kernel"
	}
	return "FAILS: no hypervisor boundary between the agents and the host kernel"
}

func usable(a backend.Availability) string {
	var b strings.Builder
	if a.Usable {
		b.WriteString("yes")
	} else {
		b.WriteString("no")
	}
	var facts []string
	if a.Tool != "" {
		facts = append(facts, a.Tool)
	}
	if a.Version != "" {
		facts = append(facts, "version "+a.Version)
	}
	if len(facts) > 0 {
		b.WriteString(" (" + strings.Join(facts, ", ") + ")")
	}
	if a.Reason != "" {
		b.WriteString(": " + a.Reason)
	}
	return b.String()
}

// kernelShort is the summary table's kernel column: the profile's text up to its first
// qualification ("separate from host (one guest kernel ...)" -> "separate from host").
func kernelShort(k string) string {
	if i := strings.IndexAny(k, "(;"); i > 0 {
		return strings.TrimSpace(k[:i])
	}
	return k
}

func printMatrix(w io.Writer, m matrixOut) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tGUARANTEE 0\tKERNEL\tUSABLE HERE")
	for _, r := range m.Backends {
		g := "holds"
		if !r.HypervisorBoundary {
			g = "FAILS"
		}
		use := "no"
		if r.Available.Usable {
			use = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, g, kernelShort(r.Kernel), use)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range m.Backends {
		fmt.Fprintf(w, "\n%s\n", r.Name)
		fmt.Fprintf(w, "  hypervisor boundary (guarantee 0): %s\n", r.Guarantee0)
		fmt.Fprintf(w, "  kernel:            %s\n", r.Kernel)
		fmt.Fprintf(w, "  filesystem bound:  %s\n", r.FilesystemBound)
		fmt.Fprintf(w, "  egress enforced:   %s\n", r.EgressEnforced)
		fmt.Fprintf(w, "  rootless runtime:  %s\n", r.RootlessRuntime)
		fmt.Fprintf(w, "  usable here now:   %s\n", usable(r.Available))
		if r.Available.Accelerator != "" {
			fmt.Fprintf(w, "  accelerator:       %s (%s)\n", r.Available.Accelerator, r.Available.AcceleratorWhy)
		}
		fmt.Fprintln(w, "  caveats:")
		for _, c := range r.Caveats {
			fmt.Fprintf(w, "    - %s\n", c)
		}
	}
	return nil
}

type backendsOptions struct {
	json bool
}

func newBackendsCmd() *cobra.Command {
	o := &backendsOptions{}
	c := &cobra.Command{
		Use:   "backends",
		Short: "Show the containment matrix: what each backend guarantees and whether it is usable here",
		Long: `Print one row per containment backend lever implements: whether a hypervisor boundary
separates the agents from the host kernel (guarantee 0), whether the kernel is shared,
what bounds the filesystem, where egress is enforced, the rootless runtime, whether the
backend can be used on this host right now (tool, version, and why not), and its caveats.
docs/backends.md explains each column.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	c.Flags().BoolVar(&o.json, "json", false, "print the matrix as JSON")
	return c
}

func (o *backendsOptions) run(cmd *cobra.Command) error {
	m := buildMatrix(cmd.Context(), backend.All())
	if o.json {
		return writeJSON(cmd.OutOrStdout(), m)
	}
	return printMatrix(cmd.OutOrStdout(), m)
}
