package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/dashboard"
	"github.com/lever-jail/lever/internal/lev/events"
)

type dashboardOptions struct {
	config string
	noOpen bool
	port   int
}

func newDashboardCmd() *cobra.Command {
	o := &dashboardOptions{}
	c := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a local web dashboard of the jail, the broker, the runs and their prompts",
		Long: `Serve the dashboard on 127.0.0.1 (a random port unless --port) and print its URL, which
carries a one-time token; the browser is opened on it where one can be. The pages show the
jail (lever status), the broker (lever broker status and the audit tail), every run of every
agent (lever ps) with its live events (lever logs -f), and the pending prompts. It serves
until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.noOpen, "no-open", false, "print the URL but do not open a browser")
	c.Flags().IntVar(&o.port, "port", 0, "the port on 127.0.0.1 (0: a random free one)")
	return c
}

func (o *dashboardOptions) run(cmd *cobra.Command) error {
	if o.port < 0 || o.port > 65535 {
		return usageErr("--port %d is not a port (0 to 65535; 0 picks a free one)", o.port)
	}
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	src, err := newJailSource(cmd, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(o.port)))
	if err != nil {
		return fmt.Errorf("dashboard: listening on 127.0.0.1:%d: %w", o.port, err)
	}
	defer ln.Close()
	tok, err := dashboard.NewToken()
	if err != nil {
		return err
	}
	srv, err := dashboard.New(src, ln.Addr().String(), tok)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "lever dashboard for jail %s: %s\n(the token works once; ^C stops the dashboard)\n", cfg.Name, srv.URL())
	if !o.noOpen {
		if err := openBrowser(srv.URL()); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "lever: dashboard: no browser opened (%v): open the URL above\n", err)
		}
	}
	c, stop := signal.NotifyContext(ctx(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return c }}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("dashboard: %w", err)
	case <-c.Done():
	}
	sc, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(sc)
	return nil
}

// openBrowser opens url with the desktop's opener, when there is one; it never waits for
// the browser.
func openBrowser(url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("%s not found", name)
	}
	c := exec.Command(p, url)
	if err := c.Start(); err != nil {
		return err
	}
	go c.Wait()
	return nil
}

// jailSource is the dashboard's Source over the functions the CLI's own commands use:
// bring-up's status (lever status), brokerctl's status and audit log (lever broker
// status), lev ps --json in each agent (lever ps), lev logs --follow --json (lever logs
// -f). It has no path into the jail of its own.
type jailSource struct {
	cmd *cobra.Command
	cfg *config.Config
}

func newJailSource(cmd *cobra.Command, cfg *config.Config) (*jailSource, error) {
	return &jailSource{cmd: cmd, cfg: cfg}, nil
}

// Jail is lever status, derived afresh for each look as lever status does: a trouble
// deriving it (no lev binary for the guest, an unusable backend) is the page's error,
// not the dashboard's end.
func (s *jailSource) Jail(ctx context.Context) (dashboard.Jail, error) {
	b, err := backend.New(s.cfg)
	if err != nil {
		return dashboard.Jail{Instance: s.cfg.Name}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return dashboard.Jail{Instance: s.cfg.Name}, err
	}
	in, err := bringup.Load(ctx, bringup.Options{Cfg: s.cfg, Backend: b, Exe: exe, Out: io.Discard})
	if err != nil {
		return dashboard.Jail{Instance: s.cfg.Name, Backend: b.Name()}, err
	}
	st := in.Status(ctx)
	yn := map[bool]string{true: "yes", false: "no"}
	j := dashboard.Jail{
		Instance: st.Instance, Backend: st.Backend, Posture: st.Egress.Posture, Verified: st.Egress.Verified,
		Guest: []string{
			"reachable: " + yn[st.Guest.Reachable],
			"provisioned: " + yn[st.Guest.Provisioned],
			"run user: " + st.Guest.RunUser,
			"podman service up: " + yn[st.Guest.PodmanUp],
		},
		Differences: st.Egress.Differences,
	}
	if st.Egress.Error != "" {
		j.Differences = append(j.Differences, "cannot verify: "+st.Egress.Error)
	}
	for _, c := range st.Containers {
		j.Guest = append(j.Guest, fmt.Sprintf("container %s: %s", c.Name, c.Status))
	}
	return j, nil
}

// auditTail is how much of the audit log's end the broker page reads.
const auditTail = 256 << 10

func (s *jailSource) Broker(ctx context.Context) (dashboard.Broker, error) {
	var b dashboard.Broker
	st, err := brokerctl.Status(s.cfg.StateDir())
	if err != nil {
		return b, err
	}
	b.Running = st.Running
	if st.State != nil {
		b.Listen, b.CertNotAfter = st.State.Listen, st.State.ServerCertNotAfter
	}
	b.Audit, err = readAuditTail(brokerctl.AuditPath(s.cfg.StateDir()), auditTail)
	return b, err
}

// readAuditTail reads the last max bytes of the audit log (none is no error: a broker
// that never ran has none).
func readAuditTail(path string, max int64) ([]dashboard.AuditLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("broker audit log: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return nil, fmt.Errorf("broker audit log %s: %w", path, err)
		}
	}
	var out []dashboard.AuditLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r brokerctl.Record
		// The first line after a seek is cut; a line that is not a record is skipped.
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Time.IsZero() {
			continue
		}
		out = append(out, dashboard.AuditLine{Time: r.Time, Who: r.Who, Route: r.Route, Status: r.Status, Outcome: r.Outcome, Detail: r.Detail})
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("broker audit log %s: %w", path, err)
	}
	return out, nil
}

// runs is lever ps: every agent's runs, merged oldest first.
func (s *jailSource) runs() (*attached, []jailRun, error) {
	a, err := attachJail(s.cmd, s.cfg)
	if err != nil {
		return nil, nil, err
	}
	var all []jailRun
	var errs []error
	for _, ag := range agentNames(s.cfg) {
		rs, err := listRuns(s.cmd, a, ag)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, rs...)
	}
	sortRuns(all)
	return a, all, errors.Join(errs...)
}

func (s *jailSource) Runs(ctx context.Context) ([]dashboard.Run, error) {
	_, rs, err := s.runs()
	out := make([]dashboard.Run, 0, len(rs))
	for _, r := range rs {
		out = append(out, dashboard.Run{Agent: r.Agent, ID: r.info.ID, Blueprint: r.info.Agent, Status: r.info.Status, Stage: r.info.stage(), Created: r.info.Created})
	}
	return out, err
}

// Events is lever logs -f --json of one run, decoded line by line as lev writes them.
func (s *jailSource) Events(ctx context.Context, agent, run string, send func(events.Event) error) error {
	ag, id, err := parseRunRef(s.cfg, agent+"/"+run)
	if err != nil {
		return err
	}
	a, err := attachJail(s.cmd, s.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	o := &logsOptions{follow: true, json: true}
	done := make(chan error, 1)
	go func() {
		var stderr limitedBuffer
		code, err := a.c.Exec(ctx, levContainer(s.cfg, ag), containers.ExecOptions{Argv: o.argv(id), Stdout: pw, Stderr: &stderr})
		if err == nil && code != 0 {
			err = fmt.Errorf("lev logs exited %d: %q", code, stderr.String())
		}
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	// Whatever ends the stream (the run's end, the page gone, a bad line), the exec is
	// stopped and waited for: its writes never block on a reader that left.
	stopExec := func() error {
		cancel()
		pr.Close()
		return <-done
	}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), events.MaxLine)
	for sc.Scan() {
		var ev events.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			stopExec()
			return fmt.Errorf("run %s/%s: lev logs printed a line that is not an event: %w", ag, id, err)
		}
		if err := send(ev); err != nil {
			stopExec()
			return err
		}
	}
	if err := sc.Err(); err != nil {
		stopExec()
		return fmt.Errorf("run %s/%s: reading lev logs: %w", ag, id, err)
	}
	pr.Close()
	return <-done
}

// limitedBuffer keeps the first 4 KiB written to it (a command's stderr, for an error).
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

// Prompts are the running runs' questions that have no answer yet, read from their
// events (lev logs --json: lev ps --json does not carry a run's question).
func (s *jailSource) Prompts(ctx context.Context) ([]dashboard.Prompt, error) {
	a, rs, err := s.runs()
	var out []dashboard.Prompt
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range rs {
		if r.info.Status != "running" {
			continue
		}
		raw, err := execCapture(s.cmd, a.c, r.Container, (&logsOptions{json: true}).argv(r.info.ID))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, pendingAsks(r.Agent, r.info.ID, raw)...)
	}
	return out, errors.Join(errs...)
}

// pendingAsks is the ask events in a run's events (JSON lines) with no answer after them.
func pendingAsks(agent, run string, raw []byte) []dashboard.Prompt {
	var out []dashboard.Prompt
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), events.MaxLine)
	for sc.Scan() {
		var ev events.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case events.Ask:
			out = append(out, dashboard.Prompt{Agent: agent, Run: run, ID: ev.Question, Tool: ev.Tool, Args: string(ev.Args), Reason: ev.Message, Gate: ev.GatePrompt, Operator: ev.Operator, Asked: ev.Time})
		case events.AnswerT, events.RunEnd:
			for i := len(out) - 1; i >= 0; i-- {
				if ev.Type == events.RunEnd || out[i].ID == ev.Question {
					out = append(out[:i], out[i+1:]...)
				}
			}
		}
	}
	return out
}

// answerArgv is lev answer of one run's question: the terminal's answer, sent through
// the daemon's API as lev run's prompter sends it. The operands follow "--", so an
// operator's text starting with "-" is never read as a flag.
func answerArgv(run, question, answer string) []string {
	return []string{levPath, "answer", "--", run, question, answer}
}

// Answer is lev answer in the run's agent's lev container, through the same exec as
// lever logs: lev checks the answer against the question pending now, as the terminal's
// prompt does, and the run records it as an answer event.
func (s *jailSource) Answer(ctx context.Context, p dashboard.Prompt, answer string) error {
	ag, id, err := parseRunRef(s.cfg, p.Agent+"/"+p.Run)
	if err != nil {
		return err
	}
	a, err := attachJail(s.cmd, s.cfg)
	if err != nil {
		return err
	}
	var stdout, stderr limitedBuffer
	code, err := a.c.Exec(ctx, levContainer(s.cfg, ag), containers.ExecOptions{Argv: answerArgv(id, p.ID, answer), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("run %s/%s: lev answer: %w", ag, id, err)
	}
	if code != 0 {
		// Quoted: lev's words, shown on the page as text.
		return fmt.Errorf("run %s/%s: lev answer exited %d: %q", ag, id, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}
