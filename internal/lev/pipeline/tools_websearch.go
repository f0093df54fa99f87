package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/provider"
)

// --- web_search ---

// MaxQuery bounds a web_search query: a search wants words, and a long "query" is more
// likely a payload (the taint gate sees the whole query as the call's target either way).
const MaxQuery = 1000

type webSearchArgs struct {
	Query string `json:"query" schema:"required"`
}

func (a webSearchArgs) validate() error {
	if strings.TrimSpace(a.Query) == "" {
		return errors.New(`argument "query" is required`)
	}
	if len(a.Query) > MaxQuery {
		return fmt.Errorf(`argument "query" is %d bytes; at most %d`, len(a.Query), MaxQuery)
	}
	return nil
}

// SearchFunc runs one web search with the run's provider and model (the runner binds
// them; nil: the provider has no web search).
type SearchFunc func(ctx context.Context, query string) (*provider.SearchResult, error)

// NotAvailable is web_search's answer when the run's provider cannot search: a result
// the model can act on (an error result, so it does not take it for a finding).
const NotAvailable = "web_search is not available: the run's provider has no web search (it is provider-backed: Anthropic's web search tool or OpenAI's, through the Responses API); use web_fetch on a URL you know instead"

// SearchDeadline bounds one web_search call: the upstream runs up to
// provider.SearchMaxUses searches and writes an answer.
const SearchDeadline = 3 * time.Minute

func webSearchTools() []*Tool {
	return []*Tool{{Name: "web_search",
		Description: "Search the web (the model provider runs the search) and return a summary with its sources.",
		Schema:      schemaFor[webSearchArgs](), parse: strict[webSearchArgs],
		deadline: func(Args) time.Duration { return SearchDeadline },
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			q := c.Args.(webSearchArgs).Query
			if p.Search == nil {
				return &Result{Content: NotAvailable, IsError: true}, nil
			}
			res, err := p.Search(ctx, q)
			if errors.Is(err, provider.ErrSearchUnavailable) {
				return &Result{Content: CapResult(NotAvailable + " (" + err.Error() + ")"), IsError: true}, nil
			}
			if err != nil {
				return nil, fmt.Errorf("web_search: %w", err)
			}
			return &Result{Content: CapResult(res.Format())}, nil
		}}}
}
