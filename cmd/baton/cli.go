package main

import (
	"context"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/internal/cli"
)

// Exit statuses (cli.Execute's).
const (
	exitOK          = cli.ExitOK
	exitFailure     = cli.ExitFailure
	exitUsage       = cli.ExitUsage
	exitInterrupted = cli.ExitInterrupted
)

// run is the whole command line, testable: it parses args, runs the command
// with ctx and returns the exit status (see cli.Execute, which also keeps
// control characters from the servers off the operator's terminal).
func run(ctx context.Context, args []string, rawStdout, rawStderr io.Writer) int {
	return cli.Execute(ctx, newRootCommand(), args, rawStdout, rawStderr)
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "Coordination for a service over its own PostgreSQL: demo and operator tools",
		Long: `baton gives a service running on a few nodes over its own PostgreSQL the
coordination it needs: role leases, fixed partitions, locks, an ordered
transactional outbox and local projections.

Start with "baton demo": three instances of a small service in one process,
with no server needed. The other commands inspect and repair a real
deployment: --postgres URL (or BATON_DATABASE_URL) and --schema choose the
database and the schema holding baton's tables.

Exit status: 0 success, 1 failure, 2 bad input, 130 interrupted.`,
	}
	// cobra's completion command: baton completion bash|zsh|fish|powershell.
	root.CompletionOptions.HiddenDefaultCmd = false
	root.Version = version()
	root.SetVersionTemplate("baton {{.Version}}\n")
	root.AddCommand(
		newDemoCommand(),
		newSchemaCommand(),
		newMigrateCommand(),
		newVerifyCommand(),
		newOutboxCommand(),
		newLeasesCommand(),
		newBenchCommand(),
	)
	return root
}

// registerDB adds the flags every operator command shares: --postgres,
// --schema and --json.
func registerDB(cmd *cobra.Command, t *ops.Target) {
	registerURL(cmd, &t.URL)
	cmd.Flags().StringVar(&t.Schema, "schema", "", "schema holding baton's tables (default: the connection's current schema)")
	cmd.Flags().BoolVar(&t.JSON, "json", false, "print JSON instead of a table")
}

// registerURL adds --postgres, the database every command but the demo
// reads BATON_DATABASE_URL for.
func registerURL(cmd *cobra.Command, url *string) {
	cmd.Flags().StringVar(url, "postgres", "", "PostgreSQL URL, e.g. postgres://app@db:5432/app (default: $"+cli.EnvDatabaseURL+")")
}

// exactArgs is cobra.ExactArgs with a usage error naming what is expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return cli.Usagef("%s takes %s (got %d arguments)", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

// noArgs refuses positional arguments with a usage error.
var noArgs = cli.NoArgs

// groupCommand is a command that only holds subcommands: with no argument it
// prints its help; an argument that names no subcommand is a usage error
// (cobra would otherwise print the help and succeed).
func groupCommand(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q for %q; see %s --help", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	c.AddCommand(subs...)
	return c
}

// version is the module version and the commit the binary was built from,
// as the Go toolchain recorded them: "v1.2.0", or "(devel)" for a build of
// a checkout, with the revision, its time and whether the tree was
// modified, and the Go version.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: built without module information)"
	}
	return formatVersion(info)
}

func formatVersion(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += ", commit " + rev
		if at != "" {
			v += " of " + at
		}
		if modified {
			v += ", modified"
		}
	}
	return v + ", " + info.GoVersion
}
