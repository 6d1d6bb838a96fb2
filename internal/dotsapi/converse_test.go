package dotsapi

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// guestSays is an event the Dot logs after it was told the message whose id
// it is given.
type guestSays func(messageID string) (typ string, data any)

func reply(text string, inReplyTo *string) guestSays {
	return func(string) (string, any) {
		return protocol.EventMessageAssistant, protocol.MessageAssistant{Text: text, InReplyTo: inReplyTo}
	}
}

func replyTo(text string) guestSays {
	return func(id string) (string, any) {
		return protocol.EventMessageAssistant, protocol.MessageAssistant{Text: text, InReplyTo: &id}
	}
}

func says(typ string, data any) guestSays {
	return func(string) (string, any) { return typ, data }
}

// olderMessage is a message id that is not the one a test posts: no event
// has id 0.
var olderMessage = wire.MessageID(0)

func TestConverse(t *testing.T) {
	errStop := errors.New("the person stopped")
	tests := map[string]struct {
		reason string
		// dot is what the Dot logs, in order, once the message is queued.
		dot  []guestSays
		wait time.Duration
		// stopAt makes OnEvent fail on an event of this type.
		stopAt string
		// wantSeen are the types OnEvent was given.
		wantSeen   []string
		wantAnswer string
		wantErr    error
	}{
		"answer": {
			reason: "the answer is the one naming the message; the chat's events before it are given, answers to other messages passed over",
			dot: []guestSays{
				says(protocol.EventToolCalled, protocol.ToolCalled{Tool: "exec", OK: true}),
				says(protocol.EventTaskStarted, protocol.TaskStarted{TaskID: "t-1"}),
				says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "a-1", Tool: "exec"}),
				reply("an answer to an older message", &olderMessage),
				replyTo("booked"),
				says(protocol.EventToolCalled, protocol.ToolCalled{Tool: "after the answer"}),
			},
			wantSeen:   []string{protocol.EventToolCalled, protocol.EventApprovalRequested},
			wantAnswer: "booked",
		},
		"unnamed answer": {
			reason:     "an answer that names no message, after the message, is taken",
			dot:        []guestSays{reply("booked, and the rest", nil)},
			wantAnswer: "booked, and the rest",
		},
		"no answer": {
			reason: "a Dot that does not answer in the wait is no answer, and what it did meanwhile was given",
			dot: []guestSays{
				says(protocol.EventToolCalled, protocol.ToolCalled{Tool: "exec"}),
				reply("an answer to an older message", &olderMessage),
			},
			wait:     2 * time.Second,
			wantSeen: []string{protocol.EventToolCalled},
			wantErr:  client.ErrNoAnswer,
		},
		"stopped": {
			reason: "an error of OnEvent ends the conversation with it",
			dot: []guestSays{
				says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "a-1", Tool: "exec"}),
				replyTo("booked"),
			},
			stopAt:   protocol.EventApprovalRequested,
			wantSeen: []string{protocol.EventApprovalRequested},
			wantErr:  errStop,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			dot := e.dots["team-a/helper"]
			c, err := client.New(e.restConfig("editor"))
			if err != nil {
				t.Fatal(err)
			}
			played := make(chan error, 1)
			go func() { played <- playDot(ctx, dot, tc.dot) }()
			var seen []string
			x, err := c.Converse(ctx, "team-a", "helper", "book the 9:40 train", client.ConverseOptions{
				Wait:  stdcmp.Or(tc.wait, 10*time.Second),
				Types: []string{protocol.EventToolCalled, protocol.EventApprovalRequested},
				OnEvent: func(_ context.Context, e wire.StreamEvent) error {
					seen = append(seen, e.Type)
					if e.Type == tc.stopAt {
						return errStop
					}
					return nil
				},
			})
			if perr := <-played; perr != nil {
				t.Fatal(perr)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("%s: Converse error = %v, want %v", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantSeen, seen); diff != "" {
				t.Errorf("%s: the events OnEvent was given (-want +got):\n%s", tc.reason, diff)
			}
			if x.Answer.Text != tc.wantAnswer {
				t.Errorf("%s: answer %q, want %q", tc.reason, x.Answer.Text, tc.wantAnswer)
			}
			if x.Accepted.EventID == 0 || x.MessageID != wire.MessageID(x.Accepted.EventID) {
				t.Errorf("%s: Exchange %+v, want the accepted message and its id", tc.reason, x)
			}
		})
	}
}

// playDot waits for the message queued for dot and logs what the Dot says
// after it, as its guest would.
func playDot(ctx context.Context, dot store.Dot, events []guestSays) error {
	var id string
	for deadline := time.Now().Add(10 * time.Second); id == ""; time.Sleep(10 * time.Millisecond) {
		rows, err := testStore.Pending(ctx, dot.UID)
		if err != nil {
			return err
		}
		if len(rows) > 0 {
			id = rows[0].ID
		} else if time.Now().After(deadline) {
			return errors.New("no message was queued within 10 s")
		}
	}
	for i, say := range events {
		typ, data := say(id)
		b, err := json.Marshal(data)
		if err != nil {
			return err
		}
		if _, err := testStore.AppendEvents(ctx, store.Event{Dot: dot, Type: typ, Source: store.SourceGuest, GuestSeq: ptr.To(int64(i + 1)), Data: b}); err != nil {
			return err
		}
	}
	return nil
}
