// Package prompt asks for passwords and lines on the terminal, for
// harmonyctl and harmony-controller.
package prompt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// Password reads a password: one line of in with fromStdin (for scripts),
// else from the terminal without echo, twice when confirm is set (a new
// password). Prompts go to out.
func Password(in io.Reader, out io.Writer, question string, fromStdin, confirm bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && line == "" {
			return "", fmt.Errorf("read the password from stdin: %w", err)
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", errors.New("stdin is not a terminal: pass --password-stdin and write the password to stdin")
	}
	ask := func(q string) (string, error) {
		fmt.Fprint(out, q)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(out)
		return string(b), err
	}
	pw, err := ask(question)
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

// Line asks for one line on the terminal, such as a user name.
func Line(in io.Reader, out io.Writer, question string) (string, error) {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return "", errors.New("stdin is not a terminal: pass the value as a flag")
	}
	fmt.Fprint(out, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	return strings.TrimSpace(line), err
}
