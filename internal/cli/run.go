package cli

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/beneath"
)

// maxInput bounds --input/--input-file: the task travels as one argv element of the exec,
// and Linux caps one argument at 128 KiB.
const maxInput = 100 << 10

type runOptions struct {
	config    string
	agent     string // blueprint; "" runs lev.blueprint
	worker    string
	input     string
	inputFile string
	yolo      bool
	allow     []string
	detach    bool
	json      bool
}

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run [AGENT]",
		Short: "Run a lev agent in the manager (or a worker), streaming its progress and prompts to this terminal",
		Long: `Run lev agent AGENT (a blueprint name, found in the user's lev settings or the tree's
.lev/agents; without it, lever.yaml's lev.blueprint) in the manager's lev container, or in
--worker NAME's, with that agent's part of the tree as its workdir. lev's live progress is
printed as it happens and the result at the end. When this terminal is interactive, lev's
ask permissions and taint-gate prompts are put to you here. Exit 0 on success, 1 on failure
or refusal, 2 when nothing was started (unknown agent or worker, jail not up, bad flags).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.agent = args[0]
			}
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	f := c.Flags()
	f.StringVar(&o.worker, "worker", "", "run in this worker's container (default: the manager)")
	f.StringVar(&o.input, "input", "", "the task, appended to the first stage's prompt")
	f.StringVar(&o.inputFile, "input-file", "", "read the task from this host file")
	f.BoolVar(&o.yolo, "yolo", false, "every ask permission becomes allow (deny stays deny)")
	f.StringArrayVar(&o.allow, "allow", nil, "turn this tool's ask permission into allow (repeatable)")
	f.BoolVar(&o.detach, "detach", false, "print the run id and return at once")
	f.BoolVar(&o.json, "json", false, "print lev's events as JSON lines on stdout")
	return c
}

// validate checks the flags alone (no config, no jail): refusals here start nothing.
func (o *runOptions) validate() error {
	if o.input != "" && o.inputFile != "" {
		return usageErr("--input and --input-file both given: pass the task one way")
	}
	if o.inputFile != "" {
		data, err := beneath.ReadFile(o.inputFile, maxInput)
		if err != nil {
			return usageErr("--input-file %s: %v", o.inputFile, err)
		}
		if err := checkInput(data); err != nil {
			return usageErr("--input-file %s: %v", o.inputFile, err)
		}
		o.input, o.inputFile = string(data), ""
	} else if err := checkInput([]byte(o.input)); err != nil {
		return usageErr("--input: %v", err)
	}
	return nil
}

// checkInput: the task is one exec argument: text, NUL-free, under the argument cap.
func checkInput(b []byte) error {
	switch {
	case len(b) > maxInput:
		return fmt.Errorf("%d bytes, more than the %d a task may have", len(b), maxInput)
	case bytes.IndexByte(b, 0) >= 0:
		return fmt.Errorf("holds a NUL byte: the task must be text")
	case !utf8.Valid(b):
		return fmt.Errorf("is not UTF-8 text")
	}
	return nil
}

// argv is the lev command run in the agent's lev container. The agent comes after "--"
// so a name starting with "-" is never read as a flag.
func (o *runOptions) argv() []string {
	a := []string{levPath, "run"}
	if o.input != "" {
		// One argument with "=": the task can never be taken for a flag of lev's.
		a = append(a, "--input="+o.input)
	}
	if o.yolo {
		a = append(a, "--yolo")
	}
	for _, t := range o.allow {
		a = append(a, "--allow="+t)
	}
	if o.detach {
		a = append(a, "--detach")
	}
	if o.json {
		a = append(a, "--json")
	}
	if o.agent != "" {
		a = append(a, "--", o.agent)
	}
	return a
}

func (o *runOptions) run(cmd *cobra.Command) error {
	if err := o.validate(); err != nil {
		return err
	}
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	agent, err := agentOf(cfg, o.worker)
	if err != nil {
		return err
	}
	a, err := attachJail(cmd, cfg)
	if err != nil {
		return err
	}
	// A terminal session carries lev's prompts to the user and their answers back; a
	// detached or --json run is for scripts and gets plain streams.
	s := sessionIf(cmd, !o.detach && !o.json, safeSession)
	return execPass(cmd, a.c, levContainer(cfg, agent), o.argv(), s, s != noSession)
}
