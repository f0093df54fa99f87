// Package tail holds the one way lever quotes the end of a command's output in an error
// (limactl's stderr, a container's log, a guest tar's stderr): the last few lines, so the
// message names the cause without pasting a whole log. It is a leaf: it imports only the
// standard library and knows nothing of who ran the command, so every layer may use it.
package tail

import "strings"

// Lines returns the last n lines of s (surrounding blank space trimmed), joined by sep: "\n"
// keeps a multi-line message, " | " folds it onto one line.
func Lines(s string, n int, sep string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, sep)
}
