package cli

import (
	"io"

	"github.com/lever-jail/lever/internal/hostterm"
)

// What the jail prints reaches a terminal of the host's with every control character made
// visible (hostterm's neutraliser): the bytes come from the agent's side (model output,
// tool arguments, file contents, a blueprint's names), and an escape sequence reaching
// the host's terminal could retitle it, rewrite what the user reads (\r, cursor moves),
// write the clipboard (OSC 52) or worse. Newline and tab pass. Only lever shell's terminal
// session, a shell the user asked for (as with docker exec -it), is a raw stream.

// safeFor wraps w in the neutraliser when it is a terminal; output to a file or a pipe
// passes unchanged.
func safeFor(w io.Writer) (io.Writer, func() error) {
	if !hostterm.IsTerminal(w) {
		return w, func() error { return nil }
	}
	t := hostterm.NewWriter(w)
	return t, t.Flush
}
