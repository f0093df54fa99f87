package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var embedded embed.FS

// staticFS is the script and the stylesheet, the only ones the CSP lets run.
var staticFS, _ = fs.Sub(embedded, "static")

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
}).ParseFS(templateFS, "templates/*.html"))

// page is what every template gets.
type pageData struct {
	Title string
	Nav   string
	CSRF  string
	Err   string
	Data  any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title string, data any, err error) {
	csrf, _ := s.session(r)
	p := pageData{Title: title, Nav: name, CSRF: csrf, Data: data}
	if err != nil {
		p.Err = err.Error()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if e := pages.ExecuteTemplate(w, name+".html", p); e != nil {
		// Headers are gone by now; the page is cut short, which shows.
		fmt.Fprintf(w, "\n<!-- template: %s -->", template.HTMLEscapeString(e.Error()))
	}
}

// jailView is the jail page's data: the status and, when the rulesets differ, their diff.
type jailView struct {
	Jail
	Diff []DiffLine
}

func (s *Server) jailPage(w http.ResponseWriter, r *http.Request) {
	j, err := s.src.Jail(r.Context())
	v := jailView{Jail: j}
	if !slices.Equal(j.Live, j.Desired) {
		v.Diff = Diff(j.Desired, j.Live)
	}
	s.render(w, r, "jail", "Jail", v, err)
}

type brokerView struct {
	Broker
	Chart Chart
}

func (s *Server) brokerPage(w http.ResponseWriter, r *http.Request) {
	b, err := s.src.Broker(r.Context())
	s.render(w, r, "broker", "Broker", brokerView{Broker: b, Chart: UsageChart(b.Audit, 12)}, err)
}

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request) {
	runs, err := s.src.Runs(r.Context())
	s.render(w, r, "runs", "Runs", runs, err)
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request) {
	agent, id := r.PathValue("agent"), r.PathValue("id")
	s.render(w, r, "run", "Run "+agent+"/"+id, struct{ Agent, ID string }{agent, id}, nil)
}

// eventStream is a run's events as Server-Sent Events, each as it happens: one JSON
// event per message. The page renders them as text.
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	err := s.src.Events(r.Context(), r.PathValue("agent"), r.PathValue("id"), func(ev events.Event) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "event: lev\ndata: %s\n\n", b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	msg := "the run's events ended"
	if err != nil && r.Context().Err() == nil {
		msg = err.Error()
	}
	// One line of data: the message is JSON-encoded like the events.
	b, _ := json.Marshal(msg)
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
	fl.Flush()
}

func (s *Server) promptsPage(w http.ResponseWriter, r *http.Request) {
	ps, err := s.src.Prompts(r.Context())
	s.render(w, r, "prompts", "Prompts", ps, err)
}

// answer answers one pending prompt with the terminal's semantics: once, session or deny
// for a permission or gate prompt, the operator's text for ask_operator. The prompt must
// be pending now; anything else changes nothing.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	agent, run, q, ans := r.PostFormValue("agent"), r.PostFormValue("run"), r.PostFormValue("question"), r.PostFormValue("answer")
	ps, err := s.src.Prompts(r.Context())
	if err != nil {
		http.Error(w, "reading the pending prompts: "+err.Error(), http.StatusBadGateway)
		return
	}
	i := slices.IndexFunc(ps, func(p Prompt) bool { return p.Agent == agent && p.Run == run && p.ID == q })
	if i < 0 {
		http.Error(w, fmt.Sprintf("no pending prompt %q in run %s/%s", q, agent, run), http.StatusConflict)
		return
	}
	ans, err = checkAnswer(ps[i], ans)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.src.Answer(r.Context(), ps[i], ans); err != nil {
		http.Error(w, "answering: "+err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, "/prompts", http.StatusSeeOther)
}

// checkAnswer holds an answer to what the terminal takes for that prompt (lev run's
// prompter, lev answer): a permission prompt yes or no (once or deny), a taint-gate
// prompt once, session or deny, an ask_operator question the operator's text, where an
// empty answer is the terminal's empty line: runner.NoOperatorAnswer. It returns the
// answer to send.
func checkAnswer(p Prompt, ans string) (string, error) {
	if !p.Operator {
		if want := p.Answers(); !slices.Contains(want, ans) {
			return "", fmt.Errorf("bad answer %q to a %s prompt (want %s)", ans, p.Kind(), strings.Join(want, ", "))
		}
		return ans, nil
	}
	switch {
	case strings.TrimSpace(ans) == "":
		return runner.NoOperatorAnswer, nil
	case len(ans) > MaxOperatorAnswer:
		return "", fmt.Errorf("bad answer: %d bytes, over the %d KiB cap for an operator's answer", len(ans), MaxOperatorAnswer>>10)
	case !utf8.ValidString(ans):
		return "", errors.New("bad answer: not UTF-8")
	}
	return ans, nil
}
