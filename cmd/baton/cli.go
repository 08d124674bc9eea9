package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/printable"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// errChecksFailed is returned when a command ran to the end and found
// something wrong (a demo check, a schema mismatch); its report is printed
// already, so nothing more is said.
var errChecksFailed = errors.New("checks failed")

// run is the whole command line, testable: it parses args, runs the command
// with ctx and returns the exit status. Nothing writes to os.Stdout or
// os.Stderr directly.
//
// Both go through printable.Writer: what the commands print comes partly
// from the database (a dead letter's error quotes an engine's answer, a
// lease row names its holder), and no control character in it may reach
// the operator's terminal. Only the demo's own progress line writes escape
// sequences, to the writer underneath.
func run(ctx context.Context, args []string, rawStdout, rawStderr io.Writer) int {
	stdout, stderr := printable.NewWriter(rawStdout), printable.NewWriter(rawStderr)
	defer stderr.Flush()
	defer stdout.Flush()
	accepted := false // set once flags and arguments passed cobra's checks
	root := newRootCommand(stdout, stderr, &accepted)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errChecksFailed):
		return exitFailure
	case errors.Is(err, cli.ErrInterrupted) || (ctx.Err() != nil && errors.Is(err, context.Canceled)):
		fmt.Fprintln(stderr, "baton: interrupted")
		return exitInterrupted
	}
	var u *cli.UsageError
	if errors.As(err, &u) || !accepted {
		// cobra's own errors (unknown command or flag, wrong argument
		// count) come before any command runs.
		fmt.Fprintf(stderr, "baton: %s\n", cli.OneLine(err.Error()))
		return exitUsage
	}
	fmt.Fprintf(stderr, "baton: %s\n", cli.OneLine(err.Error()))
	return exitFailure
}

func newRootCommand(stdout, stderr io.Writer, accepted *bool) *cobra.Command {
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
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRun: func(*cobra.Command, []string) {
			*accepted = true
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cli.Usagef("%s: %v", c.CommandPath(), err)
	})
	root.AddCommand(
		newDemoCommand(),
		newSchemaCommand(),
		newMigrateCommand(),
		newVerifyCommand(),
		newOutboxCommand(),
		newLeasesCommand(),
	)
	return root
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
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("%s takes no arguments (got %q)", cmd.CommandPath(), args[0])
	}
	return nil
}

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
