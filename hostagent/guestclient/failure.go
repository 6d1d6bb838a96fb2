package guestclient

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// codeRE is what an error code of the protocol looks like ("invalid_secret");
// anything else a guest sends in its place is not repeated.
var codeRE = regexp.MustCompile(`^[a-z][a-z_]{0,39}$`)

// DescribeFailure says what a failed call to a guest's engine was, by
// route, status and error code only: never the text the guest or a proxy
// answered, which could echo the key into the Dot's status, the log or the
// event log (ref 4.3). It is what a guest failure is called wherever one is
// reported: the guest link words its pushes with it, the deliverer its
// sends.
func DescribeFailure(what, method, route string, err error, timeout time.Duration) string {
	path := protocol.AgentRoutePrefix + route
	var se *StatusError
	switch {
	case errors.As(err, &se):
		code := "no error code"
		if codeRE.MatchString(se.Code) {
			code = se.Code
		} else if se.Code != "" {
			code = "an error code that is not the protocol's"
		}
		return fmt.Sprintf("%s (%s %s: status %d, %s)", what, method, path, se.Status, code)
	case errors.As(err, new(*AnswerError)):
		return fmt.Sprintf("%s (%s %s: the guest's answer is not the protocol's)", what, method, path)
	case errors.Is(err, ErrGuestUnproven):
		return fmt.Sprintf("%s (%s %s: the listener on the guest port did not prove it holds the Dot's token, so it was sent nothing)", what, method, path)
	case errors.Is(err, ErrGuestNotAnswering):
		return fmt.Sprintf("%s (%s %s: the guest is not answering)", what, method, path)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("%s (%s %s: no answer within %s)", what, method, path, timeout)
	}
	return fmt.Sprintf("%s (%s %s: the request did not complete)", what, method, path)
}
