package cli

// How lev's commands print text that came from outside lev (an MCP server's tool results,
// errors and stderr, a blueprint's names, a model's words): through hostterm, lev's and
// lever's one neutraliser (a leaf package of the standard library and x/sys only), so
// one rule decides what may reach a person's terminal. C0 controls, DEL, the C1 controls
// (as UTF-8 U+0080-U+009F or as raw 0x80-0x9F bytes), bytes that are not UTF-8 and the
// characters that hide or reorder text are shown escaped (\x1b, \u009b, \x9b, \u202e).
// A command prints such text only through these helpers.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

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

// writeResult prints a finished run's result for a person (lev run, lev result): the
// result is JSON (what the agent submitted), so a JSON string is printed as its text, not
// quoted ("done" prints as done), and anything else (an object, a list) indented. Decoding
// turns a \u001b escape into the control itself, so the text then goes through the
// neutraliser on a terminal, exactly as the raw bytes would; to a file or a pipe it is the
// script's data, unchanged. --json keeps the JSON as it is.
func writeResult(w io.Writer, out json.RawMessage) {
	text := resultText(out)
	if text == "" {
		return
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	fmt.Fprint(w, forTerminal(w, text))
}

// resultText is the result as a person reads it; a result that is not JSON (lev stores
// JSON, so never in practice) is shown as it is.
func resultText(out json.RawMessage) string {
	var s string
	if json.Unmarshal(out, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Indent(&b, bytes.TrimSpace(out), "", "  ") == nil {
		return b.String()
	}
	return string(out)
}
