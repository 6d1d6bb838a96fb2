package work

import (
	"fmt"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Permissions that expire (issue 24): an "always" given for a while is an
// allow with an end (the config's allow_until, the Dot's spec.allowUntil).
// The gate reads it with the engine's clock at the moment of each call; at
// and after the end the permission is ask, and the engine logs the end once.

// logExpired logs, once per end, that a permission's allow ended.
func (e *Engine) logExpired(permission string, end time.Time) {
	e.mu.Lock()
	if e.expired == nil {
		e.expired = map[string]time.Time{}
	}
	logged := e.expired[permission].Equal(end)
	e.expired[permission] = end
	e.mu.Unlock()
	if !logged {
		e.log.Info("a time-limited allow ended; the permission is asked again", "permission", permission,
			"allow_until", end.UTC().Format(time.RFC3339))
	}
}

// expiredReason is the approval's reason for a call asked because its
// allow ended.
func expiredReason(permission string, end time.Time) string {
	what := permission
	if info, ok := protocol.LookupPermission(permission); ok {
		what = fmt.Sprintf("%s (%s)", strings.ToLower(info.Label), permission)
	}
	return fmt.Sprintf("The Dot was allowed to %s until %s; that time has passed, so it asks again.",
		what, end.UTC().Format("2006-01-02 15:04 MST"))
}
