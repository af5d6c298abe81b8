package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
)

// command is one escrowd command. Its flags are defined on a flag set of
// its own before anything else happens, so `--help` and a mistake in the
// command line print that command's usage without a database.
type command struct {
	name    string // the words that select it: "merchant create"
	args    string // what follows the name in its synopsis
	summary string // one line, in the overview
	detail  string // more, in the command's own usage (optional)
	// database: the command opens DATABASE_URL (connect, migrate, event
	// store) once its command line is understood.
	database bool
	// poolOnly: the command needs the database connection alone (no
	// migrations first, no event store).
	poolOnly bool
	// required names the flags that must be given a value.
	required []string
	// argsRefusal, when set, refuses a surplus argument without echoing
	// it (a command reading a secret from standard input).
	argsRefusal string
	// positional is how many arguments may follow the flags.
	positional int
	// define adds the command's flags to fs and returns what runs it.
	define func(fs *flag.FlagSet) runFunc
	// prepare, when set, runs once the command line is understood and
	// before the database is opened (serve claims its address there).
	prepare func(fs *flag.FlagSet, inv *invocation) error
}

// runFunc runs a command whose flags are parsed: inv.env is open when the
// command uses the database.
type runFunc func(ctx context.Context, inv *invocation) error

// invocation is what a command runs with.
type invocation struct {
	cfg  Config
	env  *cliEnv // nil for a command without a database
	args []string
	// stdin gives secrets to commands that must not take them as
	// arguments (visible in ps and shell history).
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// listener is the address a serving command claimed in prepare.
	listener net.Listener
}

// usageError is a mistake in the command line (exit code 2): main prints it
// with the usage of the command it was made in.
type usageError string

func (u usageError) Error() string { return string(u) }

// commandUsage is a usage error with the usage text to print after it.
type commandUsage struct {
	err   error
	usage string
}

func (c commandUsage) Error() string { return c.err.Error() }
func (c commandUsage) Unwrap() error { return c.err }

// commands lists every command, in the order the overview shows them.
var commands []*command

// groups are the first words of commands with subcommands.
var groups = map[string]string{
	"merchant":       "merchants: create one, and change its webhook, allowlist, fees and signing secrets",
	"key":            "API keys: issue, list and revoke",
	"customer":       "a merchant's customers: erase one's personal data",
	"keys":           "the data keys of encrypted personal data and secrets: re-wrap them with a new master key",
	"projections":    "read models and the webhook subscriber: status, rebuild, and parked events",
	"events":         "the event log: export a merchant's events, copy it, seal what was written in plain text",
	"payouts":        "withdrawals the payout resumer cannot finish: list them, retry or return one",
	"webhooks":       "webhook tools that need no database",
	"files":          "uploaded files: move them into the file store, collect orphans",
	"dashboard-user": "the merchant dashboard's users",
}

func init() {
	commands = []*command{serveCommand, migrateCommand,
		merchantCreateCommand, merchantSetWebhookCommand, merchantSetAllowlistCommand, merchantSetFeesCommand, merchantSetDefaultsCommand, merchantRotateSecretCommand,
		merchantSetSigningSecretCommand, merchantSetCompatCommand,
		keyCreateCommand, keyListCommand, keyRevokeCommand, keysRotateMasterCommand, customerForgetCommand, dashboardUserCreateCommand,
		projectionsStatusCommand, projectionsRebuildCommand, projectionsRetryCommand, projectionsSkipCommand,
		payoutsHeldCommand, payoutsResolveCommand,
		auditCommand, reconcileCommand, filesMoveCommand, filesCollectCommand, eventsExportCommand, eventsCopyCommand, eventsSealCommand, demoCommand, webhooksListenCommand, paystackSimCommand}
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

const exitCodes = `Exit codes: 0 success; 1 the command failed (audit: a difference found);
2 a mistake in the command line (the command's usage is printed).
`

// overview is `escrowd help`: every command, generated from the table.
func overview() string {
	var b strings.Builder
	b.WriteString("escrowd: self-hostable merchant escrow and payments service\n\nUsage:\n")
	for _, c := range commands {
		line := "  escrowd " + c.name
		if c.args != "" {
			line += " " + c.args
		}
		fmt.Fprintf(&b, "%s\n      %s\n", line, c.summary)
	}
	b.WriteString(`
  escrowd help [COMMAND]   or   escrowd COMMAND --help
      a command's usage and flags (needs no database)

Commands that use the database, serve aside, log only warnings and errors;
add -v to log more.
Configuration comes from environment variables (docs/configuration.md): DATABASE_URL
(for the checkout's throwaway database: export DATABASE_URL=$(scripts/pg.sh url)),
ESCROW_ADDR, ESCROW_HOSTS, ESCROW_DEFAULT_ENVIRONMENT, ESCROW_RATE_LIMIT_PER_MINUTE, ...

`)
	b.WriteString(exitCodes)
	return b.String()
}

// groupUsage lists the subcommands of a group.
func groupUsage(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "escrowd %s: %s\n\nUsage:\n", group, groups[group])
	for _, c := range commands {
		if strings.HasPrefix(c.name, group+" ") {
			fmt.Fprintf(&b, "  escrowd %s %s\n      %s\n", c.name, c.args, c.summary)
		}
	}
	fmt.Fprintf(&b, "\nescrowd %s SUBCOMMAND --help shows a subcommand's flags.\n", group)
	return b.String()
}

// flagSet is c's flag set, with its flags defined.
func (c *command) flagSet() (*flag.FlagSet, runFunc, *bool) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints usage and errors itself
	fs.Usage = func() {}
	run := c.define(fs)
	var verbose *bool
	if c.database && c.name != "serve" {
		verbose = fs.Bool("v", false, "verbose: log as much as serve does (default: warnings and errors only)")
	}
	return fs, run, verbose
}

// usage is c's own usage: synopsis, detail and flags.
func (c *command) usage() string {
	fs, _, _ := c.flagSet()
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: escrowd %s", c.name)
	if c.args != "" {
		b.WriteString(" " + c.args)
	}
	fmt.Fprintf(&b, "\n\n%s\n", c.summary)
	if c.detail != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.detail, "\n"))
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		b.WriteString("\nFlags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
	}
	if !c.database {
		b.WriteString("\nNeeds no database.\n")
	}
	return b.String()
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// resolve finds the command args name and returns it with the arguments
// that follow its name; for a group without a (known) subcommand it
// returns the group's name instead.
func resolve(args []string) (c *command, rest []string, group string) {
	if len(args) >= 2 {
		if c := findCommand(args[0] + " " + args[1]); c != nil {
			return c, args[2:], ""
		}
	}
	if _, ok := groups[args[0]]; ok {
		return nil, args[1:], args[0]
	}
	return findCommand(args[0]), args[1:], ""
}

// run is runIO with nothing on standard input.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runIO(ctx, args, strings.NewReader(""), stdout, stderr)
}

// runIO is escrowd's entry point below main.
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, overview())
		return nil
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, overview())
		return nil
	}
	if args[0] == "help" {
		return help(args[1:], stdout)
	}
	c, rest, group := resolve(args)
	if group != "" {
		switch {
		case len(rest) == 0:
			return commandUsage{usageError(group + ": missing subcommand"), groupUsage(group)}
		case isHelp(rest[0]):
			fmt.Fprint(stdout, groupUsage(group))
			return nil
		default:
			return commandUsage{usageError(group + ": unknown subcommand " + rest[0]), groupUsage(group)}
		}
	}
	if c == nil {
		return commandUsage{usageError("unknown command " + args[0]), overview()}
	}
	fs, runCmd, verbose := c.flagSet()
	positional, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, c.usage())
		return nil
	}
	if err != nil {
		return commandUsage{usageError(c.name + ": " + err.Error()), c.usage()}
	}
	if len(positional) > c.positional {
		if c.argsRefusal != "" { // the argument may be a secret: never echo it
			return commandUsage{usageError(c.name + ": " + c.argsRefusal), c.usage()}
		}
		return commandUsage{usageError(c.name + ": unexpected argument " + positional[c.positional]), c.usage()}
	}
	for _, name := range c.required {
		if fs.Lookup(name).Value.String() == "" {
			return commandUsage{usageError(c.name + ": --" + name + " is required"), c.usage()}
		}
	}
	inv := &invocation{args: positional, stdin: stdin, stdout: stdout, stderr: stderr}
	if c.prepare != nil {
		if err := c.prepare(fs, inv); err != nil {
			return err
		}
	}
	if inv.listener != nil {
		defer inv.listener.Close() // already closed when the server ran
	}
	err = c.execute(ctx, inv, runCmd, verbose != nil && *verbose)
	if ue := usageError(""); errors.As(err, &ue) {
		return commandUsage{err, c.usage()}
	}
	return err
}

// parseInterspersed parses flags wherever they are among the arguments
// (`rebuild ledger -v` as well as `rebuild -v ledger`; the flag package
// alone stops at the first argument that is not a flag) and returns the
// others. Everything after "--" is an argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
}

// help is `escrowd help [COMMAND...]`.
func help(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, overview())
		return nil
	}
	c, rest, group := resolve(args)
	switch {
	case group != "" && len(rest) == 0:
		fmt.Fprint(stdout, groupUsage(group))
	case c != nil && len(rest) == 0:
		fmt.Fprint(stdout, c.usage())
	default:
		return commandUsage{usageError("help: unknown command " + strings.Join(args, " ")), overview()}
	}
	return nil
}

// execute opens what the command needs and runs it.
func (c *command) execute(ctx context.Context, inv *invocation, runCmd runFunc, verbose bool) error {
	if !c.database {
		return runCmd(ctx, inv)
	}
	cfg, err := LoadConfig()
	if err != nil {
		return err
	}
	inv.cfg = cfg
	// A server logs what it does; a one-off command only what went wrong,
	// so its own output stays readable.
	log, err := newLogger(cfg, !verbose && c.name != "serve")
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	if c.poolOnly {
		pool, err := openPool(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		inv.env = &cliEnv{Pool: pool, Log: log, Stdout: inv.stdout, Stderr: inv.stderr}
		return runCmd(ctx, inv)
	}
	env, closeEnv, err := openEnv(ctx, cfg, log, inv.stdout, inv.stderr)
	if err != nil {
		return err
	}
	defer closeEnv()
	inv.env = env
	return runCmd(ctx, inv)
}
