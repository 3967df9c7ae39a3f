package main

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/smppproxy/smppproxy/internal/buildinfo"
)

// The shell completion scripts: urfave/cli's own (they ask the binary,
// run with --generate-bash-completion, for the words that may follow).
var (
	//go:embed completion/smppproxy.bash
	bashCompletion string
	//go:embed completion/_smppproxy.zsh
	zshCompletion string
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, commit, build time and Go version (as --version does)",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(c.App.Writer, buildinfo.Read().String())
			return nil
		},
	}
}

// maxBcryptPassword is the longest password bcrypt hashes (it refuses
// longer ones rather than cutting them).
const maxBcryptPassword = 72

// maxSMPPPassword is the longest password an SMPP v3.4 bind carries.
const maxSMPPPassword = 8

func hashPasswordCommand() *cli.Command {
	return &cli.Command{
		Name:  "hash-password",
		Usage: "print the bcrypt hash of a password, for accounts[].password_hash",
		Description: "The password is read from the terminal without echo (asked twice), or from the first line of\n" +
			"standard input when it is not a terminal (`smppproxy hash-password < file`). Only the hash is\n" +
			"printed. An SMPP v3.4 bind carries at most 8 octets of password: a longer one is warned about.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "cost", Value: bcrypt.DefaultCost, Usage: fmt.Sprintf("bcrypt cost, %d to %d; each step doubles the work of every bind", bcrypt.MinCost, bcrypt.MaxCost)},
		},
		Action: func(c *cli.Context) error {
			cost := c.Int("cost")
			if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
				return fmt.Errorf("--cost must be from %d to %d (got %d)", bcrypt.MinCost, bcrypt.MaxCost, cost)
			}
			pw, err := readPassword(c.App.Reader, c.App.ErrWriter)
			if err != nil {
				return err
			}
			switch {
			case len(pw) == 0:
				return errors.New("empty password refused")
			case len(pw) > maxBcryptPassword:
				return fmt.Errorf("password refused: %d bytes, bcrypt takes at most %d", len(pw), maxBcryptPassword)
			case len(pw) > maxSMPPPassword:
				fmt.Fprintf(c.App.ErrWriter, "warning: %d bytes; an SMPP v3.4 bind carries at most %d, so no ESME can send this password\n", len(pw), maxSMPPPassword)
			}
			h, err := bcrypt.GenerateFromPassword(pw, cost)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, string(h))
			return nil
		},
	}
}

// readPassword reads a password from in: without echo, twice, when in is
// a terminal (prompts on prompt); else its first line (without the line
// end).
func readPassword(in io.Reader, prompt io.Writer) ([]byte, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "Password: ")
		pw, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return nil, err
		}
		fmt.Fprint(prompt, "Again: ")
		again, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return nil, err
		}
		if string(pw) != string(again) {
			return nil, errors.New("the passwords differ")
		}
		return pw, nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return []byte(strings.TrimRight(line, "\r\n")), nil
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "bash: smppproxy completion bash > /etc/bash_completion.d/smppproxy\n" +
			"zsh:  smppproxy completion zsh > \"${fpath[1]}/_smppproxy\"\n" +
			"fish: smppproxy completion fish > ~/.config/fish/completions/smppproxy.fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("usage: smppproxy completion bash|zsh|fish")
			}
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshCompletion)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				fmt.Fprint(c.App.Writer, s)
			default:
				return fmt.Errorf("no completion for shell %q (bash, zsh or fish)", c.Args().First())
			}
			return nil
		},
	}
}

func manCommand() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the man page (roff): smppproxy man | man -l -",
		Action: func(c *cli.Context) error {
			s, err := c.App.ToMan()
			if err != nil {
				return err
			}
			fmt.Fprint(c.App.Writer, s)
			return nil
		},
	}
}
