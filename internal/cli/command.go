package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/internal/printable"
)

// Exit statuses of the commands.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// ErrChecksFailed is returned when a command ran to the end and found
// something wrong (a demo check, a schema mismatch); its report is printed
// already, so nothing more is said.
var ErrChecksFailed = errors.New("checks failed")

// Execute runs the command tree under root with args and returns the exit
// status: ExitOK; ExitFailure on a failure (an error, or ErrChecksFailed,
// which prints nothing more); ExitUsage on bad input (a UsageError, or
// cobra's own errors about commands, flags and arguments), with one line
// saying what is wrong; ExitInterrupted when ctx ended. Nothing writes to
// the raw writers directly.
//
// Both go through printable.Writer: what the commands print comes partly
// from the servers (a dead letter's error quotes an engine's answer, a
// lease row names its holder), and no control character in it may reach
// the operator's terminal. Only a progress line (StatusLine: the demo's,
// bench's) writes escape sequences, its own, to the terminal underneath.
func Execute(ctx context.Context, root *cobra.Command, args []string, rawStdout, rawStderr io.Writer) int {
	stdout, stderr := printable.NewWriter(rawStdout), printable.NewWriter(rawStderr)
	defer stderr.Flush()
	defer stdout.Flush()
	accepted := false // set once flags and arguments passed cobra's checks
	root.SilenceErrors, root.SilenceUsage = true, true
	root.PersistentPreRun = func(*cobra.Command, []string) { accepted = true }
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return Usagef("%s: %v", c.CommandPath(), err)
	})
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrChecksFailed):
		return ExitFailure
	case errors.Is(err, ErrInterrupted) || (ctx.Err() != nil && errors.Is(err, context.Canceled)):
		fmt.Fprintf(stderr, "%s: interrupted\n", root.Name())
		return ExitInterrupted
	}
	fmt.Fprintf(stderr, "%s: %s\n", root.Name(), Message(err))
	var u *UsageError
	if errors.As(err, &u) || !accepted {
		// cobra's own errors (unknown command or flag, wrong argument
		// count) come before any command runs.
		return ExitUsage
	}
	return ExitFailure
}

// NoArgs refuses positional arguments with a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("%s takes no arguments (got %q)", cmd.CommandPath(), args[0])
	}
	return nil
}

// WriteJSON prints v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
