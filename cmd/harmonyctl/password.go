package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// readPassword reads a password: one line of stdin with --password-stdin
// (for scripts), else from the terminal without echo, twice when it is a
// new one.
func readPassword(cmd *cobra.Command, prompt string, fromStdin, confirm bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
		if err != nil && line == "" {
			return "", fmt.Errorf("read the password from stdin: %w", err)
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", errors.New("stdin is not a terminal: pass --password-stdin and write the password to stdin")
	}
	ask := func(p string) (string, error) {
		fmt.Fprint(cmd.ErrOrStderr(), p)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	pw, err := ask(prompt)
	if err != nil || !confirm {
		return pw, err
	}
	again, err := ask("Again: ")
	if err != nil {
		return "", err
	}
	if again != pw {
		return "", errors.New("the two passwords differ")
	}
	return pw, nil
}

// readLine asks for one line on the terminal, such as a user name.
func readLine(cmd *cobra.Command, prompt string) (string, error) {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return "", errors.New("stdin is not a terminal: pass the value as a flag")
	}
	fmt.Fprint(cmd.ErrOrStderr(), prompt)
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	return strings.TrimSpace(line), err
}
