package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PolicyCommand builds `lev policy`. cmd/lev sets it to policy.NewCommand when the policy
// package (issue 6) is built; until then lev policy says so.
var PolicyCommand func() *cobra.Command

func newPolicyCmd() *cobra.Command {
	if PolicyCommand != nil {
		return PolicyCommand()
	}
	return &cobra.Command{
		Use:                "policy",
		Short:              "Taint policy rules (not built into this lev)",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return &ExitError{Code: 2, Err: errors.New("lev policy is not built into this binary (internal/lev/policy missing)")}
		},
	}
}
