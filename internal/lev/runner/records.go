package runner

// A run's per-stage records: tool_calls.jsonl, mcp_requests.jsonl and stage.json.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/mcp"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// mcpRequest is one mcp_requests.jsonl line: a request an MCP server sent to lev.
type mcpRequest struct {
	Time     time.Time       `json:"time"`
	Server   string          `json:"server"`
	Method   string          `json:"method"`
	Params   json.RawMessage `json:"params,omitempty"`
	Decision string          `json:"decision"` // refused | answered
}

func mcpRequestRecord(q mcp.Request) mcpRequest {
	d := "refused"
	if q.Answered {
		d = "answered"
	}
	params := q.Params
	if len(params) > 4096 || !json.Valid(params) {
		params, _ = json.Marshal(string(params[:min(len(params), 4096)]))
	}
	return mcpRequest{Time: time.Now().UTC(), Server: q.Server, Method: q.Method, Params: params, Decision: d}
}

// recordMCPRequest appends q to runDir/mcp_requests.jsonl, making runDir first (servers
// start, and may ask, before the run's record is saved). Either failing is the caller's
// error: docs/mcp.md promises every request is in that file.
func recordMCPRequest(runDir string, q mcp.Request) error {
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return fmt.Errorf("recording MCP server %s's %s request: %w", q.Server, q.Method, err)
	}
	return appendJSONL(filepath.Join(runDir, "mcp_requests.jsonl"), mcpRequestRecord(q))
}

// callRecord is one tool_calls.jsonl line.
type callRecord struct {
	Time             time.Time          `json:"time"`
	ID               string             `json:"id"`
	Tool             string             `json:"tool"`
	Args             json.RawMessage    `json:"args"`
	Permission       string             `json:"permission,omitempty"`
	PermissionSource string             `json:"permission_source,omitempty"`
	Reads            []workfs.Access    `json:"reads,omitempty"`
	Writes           []workfs.Access    `json:"writes,omitempty"`
	Targets          []string           `json:"targets,omitempty"`
	Gate             *pipeline.Decision `json:"gate,omitempty"`
	Refusal          *pipeline.Refusal  `json:"refusal,omitempty"`
	IsError          bool               `json:"is_error,omitempty"`
	Result           string             `json:"result"`
	DurationMS       float64            `json:"duration_ms"`
}

func (e *Engine) record(r *run, ss *stageState, c *pipeline.Call, res *pipeline.Result) error {
	if err := e.labelRun(r); err != nil {
		return err
	}
	out := res.Content
	if len(out) > 4096 {
		out = out[:4096] + "…"
	}
	// The decoded arguments the tool acted on (raw bytes, as a string, only for a call
	// refused before they decoded), cut to MaxRecordArgs.
	args := RecordArgs(c.ArgsJSON())
	cr := callRecord{Time: time.Now().UTC(), ID: c.ID, Tool: c.Tool, Args: args, Permission: string(c.Permission),
		PermissionSource: c.PermissionSource, Reads: c.Reads, Writes: c.Writes, Targets: c.Targets, Gate: c.Gate,
		Refusal: res.Refusal, IsError: res.IsError, Result: out, DurationMS: float64(res.Duration.Microseconds()) / 1000}
	return appendJSONL(filepath.Join(ss.dir, "tool_calls.jsonl"), cr)
}

// MaxRecordArgs caps the arguments one tool_calls.jsonl line keeps. A model decides how
// big its arguments are (a refused call's raw bytes reach here undecoded, as large as the
// provider's response), so without a cap every call could add that much to lev's disk.
const MaxRecordArgs = 64 << 10

// truncatedArgs stands in for arguments past MaxRecordArgs: the cut is said, and the
// hash of the whole lets anyone holding the whole (the conversation, the written file)
// prove which arguments these were.
type truncatedArgs struct {
	TruncatedAt int    `json:"truncated_at"`
	Bytes       int    `json:"bytes"`
	SHA256      string `json:"sha256"`
	Head        string `json:"head"`
}

// RecordArgs is args as tool_calls.jsonl keeps them: unchanged up to MaxRecordArgs bytes,
// else a truncatedArgs object with the first MaxRecordArgs bytes (cut at a character's
// start, invalid UTF-8 dropped), the whole's size and its SHA-256.
func RecordArgs(args json.RawMessage) json.RawMessage {
	if len(args) <= MaxRecordArgs {
		return args
	}
	n := MaxRecordArgs
	for n > 0 && !utf8.RuneStart(args[n]) {
		n--
	}
	sum := sha256.Sum256(args)
	b, _ := json.Marshal(truncatedArgs{TruncatedAt: MaxRecordArgs, Bytes: len(args), SHA256: hex.EncodeToString(sum[:]),
		Head: strings.ToValidUTF8(string(args[:n]), "")})
	return b
}

// saveStage writes the stage's conversation and stage.json, labelled first.
func (e *Engine) saveStage(r *run, ss *stageState) error {
	if err := e.labelRun(r); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(ss.dir, "messages.json"), ss.messages); err != nil {
		return err
	}
	return writeJSON(filepath.Join(ss.dir, "stage.json"), ss.rec)
}

// recordableCalls makes a model's tool calls storable: arguments that are not JSON (a
// model's malformed output) are kept as a JSON string of the raw text, so messages.json
// and stage.json can still be written and the pipeline refuses the call as bad arguments.
func recordableCalls(calls []provider.ToolCall) []provider.ToolCall {
	for i, tc := range calls {
		if !json.Valid(tc.Args) {
			calls[i].Args, _ = json.Marshal(string(tc.Args))
		}
	}
	return calls
}

// gateErr is a gate's failure to write its own record (taint_state.json): the run's taint
// would be lost on resume, so the run stops.
func gateErr(g pipeline.Gate) error {
	if e, ok := g.(interface{ Err() error }); ok {
		return e.Err()
	}
	return nil
}
