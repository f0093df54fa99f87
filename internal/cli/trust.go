package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/hosttrust"
	"github.com/lever-jail/lever/internal/keyfile"
)

// Trust on first use. A lever.yaml can come with a cloned repository, and lever up does
// what it says: the broker reads the key file it names and sends that key to the upstream
// it names; the agents get the tree, the egress and the ports it asks for. So lever up
// --dry-run shows these grants, and the first up of a lever.yaml asks the person to
// confirm them ([y/N] on a terminal, --yes for scripts); lever keeps the confirmed block
// (hosttrust.Keep) and asks again only when it changes, showing what changed.

// grant is one line of the grant block.
type grant struct{ name, value string }

// grantsOf is what cfg grants the jail, in a fixed order. Pure: it reads no file.
func grantsOf(cfg *config.Config) []grant {
	g := []grant{{"tree", cfg.TreePath + " (the agents read and write it)"}}
	gitv := cfg.Git
	if gitv == "" {
		gitv = "read-only"
	}
	g = append(g, grant{"git", gitv})
	key, up, routes := "none (llm_auth: subscription)", "none", "none"
	if cfg.Broker.LLMAuth != config.AuthSubscription {
		key = cfg.APIKeyPath() + " (the broker reads it and sends the key upstream)"
		up = cfg.Broker.LLMUpstream
		kind, dflt := config.LLMKindOpenAI, ""
		if brokerctl.DefaultAuthHeader(up) == brokerctl.AuthXAPIKey {
			kind = config.LLMKindAnthropic
		}
		r := cfg.Broker.LLMRoutes
		if r == nil {
			r, dflt = config.DefaultLLMRoutes(kind), " (the "+kind+" defaults)"
		}
		routes = strings.Join(r, ", ") + dflt
		if len(r) == 0 {
			routes = "none"
		}
	}
	g = append(g, grant{"api key file", key}, grant{"llm upstream", up}, grant{"llm routes", routes})
	var sub []string
	for _, w := range cfg.Workers {
		if w.LLMAuth == config.AuthSubscription {
			sub = append(sub, w.Name)
		}
	}
	if len(sub) > 0 {
		g = append(g, grant{"subscription workers", strings.Join(sub, ", ") + " (they reach Anthropic directly)"})
	}
	egress := cfg.Egress
	switch egress {
	case "closed":
		egress += " (the agents reach only the broker)"
	case "open":
		egress += " (the agents reach the internet; not the host, nor the LAN)"
	}
	g = append(g, grant{"egress", egress})
	ports := "none"
	if len(cfg.Manager.AllowPorts) > 0 {
		var ps []string
		for _, p := range cfg.Manager.AllowPorts {
			ps = append(ps, strconv.Itoa(p))
		}
		ports = strings.Join(ps, ", ") + " (host loopback ports the manager reaches on the host alias)"
	}
	return append(g, grant{"allowed ports", ports})
}

// grantText renders the block, one "name: value" line each, every value made safe for a
// terminal (a lever.yaml from a clone could hide a path behind escape sequences).
func grantText(gs []grant) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "  %-20s %s\n", g.name+":", hostterm.EscapeLine(g.value))
	}
	return b.String()
}

// printGrants is the dry run's block.
func printGrants(w io.Writer, cfg *config.Config) {
	fmt.Fprintf(w, "grants of %s (lever up asks you to confirm them at the first bring-up):\n%s", hostterm.EscapeLine(cfg.Path), grantText(grantsOf(cfg)))
}

// checkKeyFile refuses an api_key_file the agents could read or that is not the user's
// own (keyfile): before anything is planned or brought up.
func checkKeyFile(cfg *config.Config) error {
	if cfg.Broker.LLMAuth == config.AuthSubscription || cfg.APIKeyPath() == "" {
		return nil
	}
	if err := keyfile.Check(cfg.APIKeyPath(), cfg.TreePath); err != nil {
		return fmt.Errorf("broker.api_key_file: %w", err)
	}
	return nil
}

// configReal is the lever.yaml's symlink-free path, which names its kept grants.
func configReal(cfg *config.Config) string {
	if r, err := filepath.EvalSymlinks(cfg.Path); err == nil {
		return r
	}
	return cfg.Path
}

// confirmGrants asks, when the grants of cfg are not the ones kept as confirmed, whether
// to bring the jail up with them; yes (--yes) confirms without asking. A confirmed block
// is kept before anything is brought up.
func confirmGrants(cmd *cobra.Command, cfg *config.Config, yes bool) error {
	real := configReal(cfg)
	text := grantText(grantsOf(cfg))
	kept, err := hosttrust.Kept(config.StateRoot(), real)
	if err != nil {
		return err
	}
	if kept != nil && string(kept) == text {
		return nil
	}
	w := cmd.ErrOrStderr()
	shown := hostterm.EscapeLine(real)
	if kept == nil {
		fmt.Fprintf(w, "lever: first bring-up of %s; it grants the jail:\n%s", shown, text)
	} else {
		fmt.Fprintf(w, "lever: the grants of %s changed since you confirmed them:\n%s", shown, grantDiff(string(kept), text))
	}
	switch {
	case yes:
		fmt.Fprintln(w, "lever: confirmed by --yes")
	case !stdinTerminal(cmd):
		return exitcode.New(2, fmt.Errorf("the grants of %s are not confirmed, and stdin is not a terminal to ask on; nothing was brought up: read them above (or with lever up --dry-run), then run lever up --yes to confirm them", real))
	default:
		fmt.Fprint(w, "bring the jail up with these grants? [y/N] ")
		line, _ := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 256)).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return exitcode.New(2, fmt.Errorf("not confirmed; nothing was brought up"))
		}
	}
	return hosttrust.Keep(config.StateRoot(), real, []byte(text))
}

// grantDiff shows the lines of the new block, each changed one marked "+", with the line
// it replaces marked "-" before it.
func grantDiff(old, now string) string {
	was := map[string]string{}
	for _, l := range strings.Split(strings.TrimRight(old, "\n"), "\n") {
		was[grantName(l)] = l
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(now, "\n"), "\n") {
		o, ok := was[grantName(l)]
		switch {
		case ok && o == l:
			fmt.Fprintf(&b, " %s\n", l)
		case ok:
			fmt.Fprintf(&b, "-%s\n+%s\n", o, l)
		default:
			fmt.Fprintf(&b, "+%s\n", l)
		}
		delete(was, grantName(l))
	}
	for _, l := range strings.Split(strings.TrimRight(old, "\n"), "\n") {
		if _, gone := was[grantName(l)]; gone && l != "" {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	return b.String()
}

func grantName(line string) string {
	n, _, _ := strings.Cut(strings.TrimSpace(line), ":")
	return n
}

// stdinTerminal says whether the command's stdin is a terminal to ask on.
func stdinTerminal(cmd *cobra.Command) bool {
	f, ok := cmd.InOrStdin().(*os.File)
	return ok && hostterm.IsTerminal(f)
}
