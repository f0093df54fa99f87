package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// --- network tools ---

type fetchArgs struct {
	URL     string            `json:"url" schema:"required"`
	Headers map[string]string `json:"headers"`
}

func (a fetchArgs) validate() error                      { return checkURL(a.URL) }
func (a fetchArgs) request() (string, map[string]string) { return a.URL, a.Headers }

// webFetchArgs: web_fetch takes a URL and nothing else (its schema has no headers).
type webFetchArgs struct {
	URL string `json:"url" schema:"required"`
}

func (a webFetchArgs) validate() error                      { return checkURL(a.URL) }
func (a webFetchArgs) targets() []string                    { return []string{a.URL} }
func (a webFetchArgs) request() (string, map[string]string) { return a.URL, nil }
func (a fetchArgs) targets() []string                       { return []string{a.URL} }

type postArgs struct {
	URL         string            `json:"url" schema:"required"`
	Body        string            `json:"body"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
}

func (a postArgs) validate() error   { return checkURL(a.URL) }
func (a postArgs) targets() []string { return []string{a.URL} }

func httpDeadline(Args) time.Duration { return HTTPDeadline }

func checkURL(s string) error {
	if s == "" {
		return errors.New(`argument "url" is required`)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: want an absolute http or https URL", s)
	}
	return nil
}

func doHTTP(ctx context.Context, p *Pipeline, tool, method, u, body, ctype string, hdr map[string]string) (*Result, error) {
	// Dial the host the taint gate matched (2130706433 is 127.0.0.1 there; Go's resolver
	// would ask DNS for it), never another reading of the same text.
	u = taint.DialURL(u)
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	client := p.HTTP
	if client == nil {
		client = &http.Client{Timeout: HTTPDeadline, CheckRedirect: provider.SameOrigin}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	data, err := capread.Body(resp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	s := CapResult(string(data))
	return &Result{Content: fmt.Sprintf("HTTP %d\n%s", resp.StatusCode, s), IsError: resp.StatusCode >= 400}, nil
}

// netTools are the web and HTTP tools.
func netTools() []*Tool {
	var out []*Tool
	get := func(tool string) func(context.Context, *Pipeline, *Call) (*Result, error) {
		return func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			u, hdr := c.Args.(interface {
				request() (string, map[string]string)
			}).request()
			return doHTTP(ctx, p, tool, http.MethodGet, u, "", "", hdr)
		}
	}
	out = append(out, &Tool{Name: "web_fetch", Description: "Fetch a web page.",
		Schema: schemaFor[webFetchArgs](), parse: strict[webFetchArgs], run: get("web_fetch"), deadline: httpDeadline})
	out = append(out, &Tool{Name: "http_get", Description: "HTTP GET a URL.",
		Schema: schemaFor[fetchArgs](),
		parse:  strict[fetchArgs], run: get("http_get"), deadline: httpDeadline})
	out = append(out, &Tool{Name: "http_post", Description: "HTTP POST a body to a URL.",
		Schema: schemaFor[postArgs](),
		parse:  strict[postArgs], deadline: httpDeadline,
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(postArgs)
			return doHTTP(ctx, p, "http_post", http.MethodPost, a.URL, a.Body, a.ContentType, a.Headers)
		}})
	return out
}
