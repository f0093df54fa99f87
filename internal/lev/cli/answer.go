package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// answerOptions is `lev answer RUN QUESTION ANSWER`.
type answerOptions struct {
	Run, Question, Answer string
}

func newAnswerCmd() *cobra.Command {
	opts := &answerOptions{}
	cmd := &cobra.Command{
		Use:   "answer RUN QUESTION ANSWER",
		Short: "Answer an interactive run's pending question, as its lev run terminal would",
		Long: `Answer run RUN's pending question QUESTION (its id, e.g. q1) as the terminal of the lev
run that asked would: a permission prompt takes once or deny; a taint-gate prompt once,
session or deny; an ask_operator question the operator's text (empty: no answer). The
answer goes to the daemon's API, the one the terminal's prompt uses, and the run records it
as an answer event. lever dashboard answers prompts with this command.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Run, opts.Question, opts.Answer = args[0], args[1], args[2]
			return runAnswer(cmdContext(cmd), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	return cmd
}

// PromptAnswers are the answers a prompt takes at the terminal: a permission prompt is
// yes or no (once or deny); only the taint gate offers session.
func PromptAnswers(q *runner.Question) []string {
	if q.Gate {
		return []string{runner.AnswerOnce, runner.AnswerSession, runner.AnswerDeny}
	}
	return []string{runner.AnswerOnce, runner.AnswerDeny}
}

func runAnswer(ctx context.Context, opts *answerOptions, stdout, stderr io.Writer) error {
	c, err := daemonClient(ctx, stderr)
	if err != nil {
		return err
	}
	rec, err := c.Get(ctx, opts.Run)
	if err != nil {
		return exitcode.New(2, runErr(opts.Run, err))
	}
	q := rec.Question
	if q == nil || q.ID != opts.Question {
		return exitcode.New(2, fmt.Errorf("run %s has no pending question %q", opts.Run, opts.Question))
	}
	ans := opts.Answer
	switch {
	case q.Operator:
		// The terminal's empty line: the agent learns the person chose not to answer.
		if strings.TrimSpace(ans) == "" {
			ans = runner.NoOperatorAnswer
		}
	case !slices.Contains(PromptAnswers(q), ans):
		return exitcode.New(2, fmt.Errorf("bad answer %q to %s's %s prompt (want %s)", ans, q.ID, promptKind(q), strings.Join(PromptAnswers(q), ", ")))
	}
	// The daemon checks the rest (the operator's text: UTF-8, the cap) and that the
	// question is still the pending one; its refusal is the command's.
	if err := c.Answer(ctx, opts.Run, opts.Question, ans); err != nil {
		return exitcode.New(2, runErr(opts.Run, err))
	}
	fmt.Fprintln(stdout, hostterm.EscapeLine(fmt.Sprintf("answered %s of run %s", q.ID, opts.Run)))
	return nil
}

func promptKind(q *runner.Question) string {
	switch {
	case q.Gate:
		return "taint-gate"
	case q.Operator:
		return "ask_operator"
	}
	return "permission"
}
