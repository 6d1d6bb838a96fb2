package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// delegateTaskCall checks that the config lets the Dot ask the Dot it names
// and reports the call, with its arguments, in its tool.called. It makes
// nothing: the host checks both Dots' consent and the bounds again when it
// reads the call, makes the other Dot's Task, and sends the answer later as
// a system.event.
func (r *Runner) delegateTaskCall(a map[string]any) Result {
	dot := str(a, "dot")
	var canAsk []string
	if r.env.CanAsk != nil {
		canAsk = r.env.CanAsk()
	}
	if !slices.Contains(canAsk, dot) {
		if len(canAsk) == 0 {
			return fail("Your configuration lets you ask no other Dot.")
		}
		return fail(fmt.Sprintf("Your configuration does not let you ask %q; you may ask: %s.", dot, strings.Join(canAsk, ", ")))
	}
	if strings.TrimSpace(str(a, "description")) == "" {
		return fail("The description is empty: say what the other Dot should do.")
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return fail(fmt.Sprintf("The arguments could not be encoded: %v.", err))
	}
	res := ok(fmt.Sprintf("Asked %s; its answer will arrive later as a system event (a message in your chat starting with [Delegation]). "+
		"Do not ask again for the same work.", dot))
	res.CalledArguments = raw
	return res
}
