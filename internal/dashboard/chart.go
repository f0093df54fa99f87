package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Chart is requests and tokens per agent over time, drawn server-side as inline SVG
// (no script, no external asset).
type Chart struct {
	Width, Height int
	Series        []Series
	From, To      time.Time
	MaxRequests   int
	MaxTokens     int
}

// Series is one agent's line.
type Series struct {
	Agent    string
	Color    string
	Points   string // SVG polyline points for requests per bucket
	Tokens   string // SVG polyline points for tokens per bucket ("" when none recorded)
	Requests int
	TokenSum int
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"}

// UsageChart buckets the jail listener's requests (an agent's certificate in Who) into
// n time buckets per agent.
func UsageChart(audit []AuditLine, n int) Chart {
	c := Chart{Width: 600, Height: 160}
	per := map[string][]AuditLine{}
	for _, a := range audit {
		if a.Who == "" || a.Who == "-" || a.Time.IsZero() {
			continue
		}
		per[a.Who] = append(per[a.Who], a)
		if c.From.IsZero() || a.Time.Before(c.From) {
			c.From = a.Time
		}
		if a.Time.After(c.To) {
			c.To = a.Time
		}
	}
	if len(per) == 0 || n < 1 {
		return c
	}
	span := c.To.Sub(c.From)
	if span <= 0 {
		span = time.Second
	}
	bucket := func(t time.Time) int { return min(n-1, int(float64(t.Sub(c.From))/float64(span)*float64(n))) }
	agents := make([]string, 0, len(per))
	for a := range per {
		agents = append(agents, a)
	}
	slices.Sort(agents)
	reqs, toks := map[string][]int{}, map[string][]int{}
	for _, a := range agents {
		reqs[a], toks[a] = make([]int, n), make([]int, n)
		for _, l := range per[a] {
			b := bucket(l.Time)
			reqs[a][b]++
			toks[a][b] += l.Tokens
			c.MaxRequests = max(c.MaxRequests, reqs[a][b])
			c.MaxTokens = max(c.MaxTokens, toks[a][b])
		}
	}
	points := func(v []int, top int) string {
		if top == 0 {
			return ""
		}
		var b strings.Builder
		for i, x := range v {
			px := 10 + float64(i)*float64(c.Width-20)/float64(max(1, n-1))
			py := float64(c.Height-10) - float64(x)/float64(top)*float64(c.Height-20)
			fmt.Fprintf(&b, "%.1f,%.1f ", px, py)
		}
		return strings.TrimSpace(b.String())
	}
	for i, a := range agents {
		s := Series{Agent: a, Color: palette[i%len(palette)], Points: points(reqs[a], c.MaxRequests), Tokens: points(toks[a], c.MaxTokens)}
		for b := range n {
			s.Requests += reqs[a][b]
			s.TokenSum += toks[a][b]
		}
		c.Series = append(c.Series, s)
	}
	return c
}
