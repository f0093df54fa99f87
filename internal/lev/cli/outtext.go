package cli

// How lev's commands print text that came from outside lev (an MCP server's tool results,
// errors and stderr, a blueprint's names, a model's words): through hostterm, lev's and
// lever's one neutraliser (a leaf package of the standard library and x/sys only), so
// one rule decides what may reach a person's terminal. C0 controls, DEL, the C1 controls
// (as UTF-8 U+0080-U+009F or as raw 0x80-0x9F bytes), bytes that are not UTF-8 and the
// characters that hide or reorder text are shown escaped (\x1b, \u009b, \x9b, \u202e).
// A command prints such text only through these helpers.

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/lever-jail/lever/internal/hostterm"
)

// writeJSON prints v as one JSON document (indented when indent is set) with DEL, the C1
// controls and the invisible characters, which JSON lets a string hold raw, written as
// \u escapes: the same JSON to a decoder, nothing a terminal obeys when it is printed.
func writeJSON(w io.Writer, v any, indent bool) error {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", hostterm.EscapeJSON(b))
	return err
}

// sayf prints one formatted line with every string, error and Stringer argument
// neutralised for one line (its newlines and tabs shown too, so outside text can neither
// steer the terminal nor forge a line of lev's own); the format is lev's.
func sayf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, format, lineArgs(a)...)
}

func lineArgs(a []any) []any {
	out := make([]any, len(a))
	for i, v := range a {
		switch v := v.(type) {
		case string:
			out[i] = hostterm.EscapeLine(v)
		case error:
			out[i] = hostterm.EscapeLine(v.Error())
		case fmt.Stringer:
			out[i] = hostterm.EscapeLine(v.String())
		case []byte:
			out[i] = hostterm.EscapeLine(string(v))
		case json.RawMessage:
			out[i] = hostterm.EscapeLine(string(v))
		default:
			out[i] = v
		}
	}
	return out
}
