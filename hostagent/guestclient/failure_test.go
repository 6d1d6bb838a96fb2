package guestclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestDescribeFailure(t *testing.T) {
	tests := map[string]struct {
		reason string
		err    error
		want   string
	}{
		"status": {"a refusal: route, status, code", &StatusError{Status: 400, Code: "invalid_secret", Message: "the key sk-1 is bad"},
			"x (POST /v1/agent/secrets: status 400, invalid_secret)"},
		"no code": {"a proxy's answer without the protocol's body", &StatusError{Status: 502}, "x (POST /v1/agent/secrets: status 502, no error code)"},
		"answer": {"an answer read strictly and refused: said, without the guest's words",
			&AnswerError{Method: "POST", Path: "/v1/agent/secrets", Err: errors.New(`the body has an unknown field "sk-1"`)},
			"x (POST /v1/agent/secrets: the guest's answer is not the protocol's)"},
		"timeout": {"no answer in time", fmt.Errorf("guest: %w", context.DeadlineExceeded), "x (POST /v1/agent/secrets: no answer within 10s)"},
		"other": {"a transport error's text is not repeated either (a malformed answer can be quoted in it)",
			errors.New(`malformed HTTP response "sk-1"`), "x (POST /v1/agent/secrets: the request did not complete)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := DescribeFailure("x", http.MethodPost, protocol.RouteSecrets, tc.err, 10*time.Second); got != tc.want {
				t.Errorf("%s\nDescribeFailure() = %q, want %q", tc.reason, got, tc.want)
			}
		})
	}
}
