package main

import (
	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/internal/prompt"
)

// readPassword reads a password for cmd (see prompt.Password).
func readPassword(cmd *cobra.Command, question string, fromStdin, confirm bool) (string, error) {
	return prompt.Password(cmd.InOrStdin(), cmd.ErrOrStderr(), question, fromStdin, confirm)
}

// readLine asks for one line on the terminal, such as a user name.
func readLine(cmd *cobra.Command, question string) (string, error) {
	return prompt.Line(cmd.InOrStdin(), cmd.ErrOrStderr(), question)
}
