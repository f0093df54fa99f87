package pipeline

import (
	"fmt"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/workfs"
)

// The cap table: every tool's result and every write a tool makes is bounded by one of
// these, and every cap that bites says so by name (a truncation note in a result, a
// refusal for a write, which then changes nothing). docs/lev.md ("Tool caps") lists them.
const (
	// MaxReadBytes bounds the file content read_file returns, and read_files' together.
	MaxReadBytes = 1 << 20
	// MaxResultBytes bounds every other result: each shell stream, an HTTP body, an MCP
	// tool's result or error, list_dir's listing.
	MaxResultBytes = 256 << 10
	// MaxListEntries bounds the entries list_dir returns.
	MaxListEntries = 10000
	// MaxWriteBytes bounds every write: write_file's content, the file edit_file reads
	// and the file it leaves. The file tools' own enforcement is workfs's.
	MaxWriteBytes = workfs.MaxWriteBytes
	// MaxOutputBytes bounds submit_output's output (the stage's answer, kept in the run
	// record and handed to the next stage).
	MaxOutputBytes = workfs.MaxWriteBytes
	// MaxCallResultBytes is the ceiling over any call's result text, whatever the tool
	// (a refusal's message included): Handle cuts anything past it. Each tool's own cap
	// above keeps it well below; this is the backstop for one that does not.
	MaxCallResultBytes = 2 << 20
)

// CapResult cuts s to at most MaxResultBytes, at a UTF-8 character's start (the cut never
// leaves half a character for the provider to mangle), and says where it was cut.
func CapResult(s string) string {
	if len(s) <= MaxResultBytes {
		return s
	}
	return cutAt(s, MaxResultBytes) + fmt.Sprintf("\n[truncated at %d bytes]", MaxResultBytes)
}

// capCall is the backstop of the cap table, applied to every call's result by Handle.
func capCall(tool string, r *Result) {
	if len(r.Content) > MaxCallResultBytes {
		r.Content = cutAt(r.Content, MaxCallResultBytes) +
			fmt.Sprintf("\n[%s: result truncated at %d bytes, the 2 MiB cap on any tool result (MaxCallResultBytes)]", tool, MaxCallResultBytes)
	}
	if r.Refusal != nil && len(r.Refusal.Msg) > MaxCallResultBytes {
		r.Refusal.Msg = cutAt(r.Refusal.Msg, MaxCallResultBytes) + "\n[truncated]"
	}
}

// cutAt is s cut to at most n bytes at a character's start.
func cutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
