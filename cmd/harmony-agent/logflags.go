package main

import (
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/harmonykaas/harmony/internal/logging"
)

// logFlags are the log flags every harmony-agent command takes.
type logFlags struct{ format, level string }

func (l *logFlags) add(f *pflag.FlagSet) {
	f.StringVar(&l.format, "log-format", "text", "text or json")
	f.StringVar(&l.level, "log-level", "info", "debug, info, warn or error")
}

// logger is the logger the flags ask for, on standard error.
func (l *logFlags) logger() (*slog.Logger, error) { return logging.New(os.Stderr, l.format, l.level) }
