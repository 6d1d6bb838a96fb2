package cli

import (
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns the process logger: zap through logr, one line per event,
// on stderr. verbosity raises logr V-levels (klog's -v) that are shown.
func newLogger(verbosity int) logr.Logger {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.EncodeLevel = zapcore.CapitalLevelEncoder
	cfg.ConsoleSeparator = " "
	level := zap.NewAtomicLevelAt(zapcore.Level(-verbosity))
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(cfg), zapcore.Lock(stderr()), level)
	return zapr.NewLogger(zap.New(core))
}

func stderr() zapcore.WriteSyncer { return zapcore.AddSync(os.Stderr) }
