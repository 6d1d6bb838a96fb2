// Package upstreamlog keeps the errors upstream libraries log on a healthy
// server out of our log's errors. The API server and controller-runtime each
// log, at every start or stop of a server with nothing wrong, a line as an
// error; a person reading the log would take it for a fault. Those lines,
// and only those, are logged as the library's info instead.
package upstreamlog

import (
	"github.com/go-logr/logr"
)

// NotError is one known line: its message, and its error's text ("" for a
// line logged without an error, as klog's Errorf is).
type NotError struct {
	Msg, Err string
}

// Quiet is log, with the known lines it is given as errors logged as info
// at level (the level the library's own info is shown at).
func Quiet(log logr.Logger, level int, known ...NotError) logr.Logger {
	return logr.New(&sink{LogSink: log.GetSink(), level: level, known: known}).V(log.GetV())
}

type sink struct {
	logr.LogSink
	level int
	known []NotError
}

func (s *sink) Error(err error, msg string, kv ...any) {
	for _, k := range s.known {
		if k.Msg == msg && k.Err == errText(err) {
			if s.Enabled(s.level) {
				s.LogSink.Info(s.level, msg, kv...)
			}
			return
		}
	}
	s.LogSink.Error(err, msg, kv...)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{LogSink: s.LogSink.WithValues(kv...), level: s.level, known: s.known}
}

func (s *sink) WithName(name string) logr.LogSink {
	return &sink{LogSink: s.LogSink.WithName(name), level: s.level, known: s.known}
}
