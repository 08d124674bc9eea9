package main

import (
	"github.com/spf13/cobra"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
)

func newLeasesCommand() *cobra.Command {
	var f ops.Target
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "List every role lease: holder, address, fencing token, expiry",
		Long: `List every row of baton_role_leases: the role, the instance holding it, the
address it advertises, the fencing token of its term and when the term ends.
Whether a lease is live is judged by the database clock, as the lease rules
are. A released or expired lease keeps its last holder and token; the next
holder's token is larger.`,
		Example: "  baton leases --postgres postgres://app@db:5432/app --schema baton\n  baton leases --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ops.Leases(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	registerDB(cmd, &f)
	return cmd
}
