package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestDecideDelegation(t *testing.T) {
	spec := func(canAsk, acceptsFrom []string, delegate dotsv1.Decision) dotsv1.DotSpec {
		s := dotsv1.DotSpec{Delegation: &dotsv1.DotDelegation{CanAsk: canAsk, AcceptsFrom: acceptsFrom}}
		if delegate != "" {
			s.Permissions = map[string]dotsv1.Decision{DelegatePermission: delegate}
		}
		return s
	}
	receiver := spec(nil, []string{"boss"}, "")
	asker := spec([]string{"helper"}, nil, dotsv1.Decision("allow"))
	args := DelegationArgs{Dot: "helper", Description: "do it"}
	cases := map[string]struct {
		reason string
		args   DelegationArgs
		facts  DelegationFacts
		want   DelegationDecision
	}{
		"consented": {
			reason: "both sides consent and the asker's config allows: a first-level request",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: asker, Receiver: &receiver},
			want: DelegationDecision{Depth: 1},
		},
		"one level deeper": {
			reason: "a request made in a delegated task is one deeper",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: asker, Receiver: &receiver, ParentDepth: 2},
			want: DelegationDecision{Depth: 3},
		},
		"too deep": {
			reason: "the tree stops at MaxDelegationDepth",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: asker, Receiver: &receiver, ParentDepth: 3},
			want: DelegationDecision{Refused: "the request would be 4 deep; a request made for another Dot may be at most 3 deep"},
		},
		"fan-out": {
			reason: "at most MaxDelegationFanOut requests open",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: asker, Receiver: &receiver, Open: 5},
			want: DelegationDecision{Refused: "you have 5 requests open already, the most a Dot may have; wait for an answer"},
		},
		"asker does not list": {
			reason: "the asker's canAsk must name the receiver (the guest checked it; a guest is not trusted)",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: spec([]string{"other"}, nil, "allow"), Receiver: &receiver},
			want: DelegationDecision{Refused: "your delegation.canAsk does not name helper"},
		},
		"receiver does not accept": {
			reason: "the receiver's acceptsFrom must name the asker",
			args:   args, facts: DelegationFacts{Asker: "intruder", AskerSpec: asker, Receiver: &receiver},
			want: DelegationDecision{Refused: "helper does not accept requests from you (its delegation.acceptsFrom does not name intruder)"},
		},
		"no such Dot": {
			reason: "a receiver that does not exist",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: asker},
			want: DelegationDecision{Refused: "there is no Dot named helper in your namespace"},
		},
		"itself": {
			reason: "a Dot never asks itself",
			args:   DelegationArgs{Dot: "boss", Description: "x"}, facts: DelegationFacts{Asker: "boss", AskerSpec: spec([]string{"boss"}, []string{"boss"}, "allow")},
			want: DelegationDecision{Refused: "a Dot cannot ask itself"},
		},
		"asks without approval": {
			reason: "the default, ask, needs a person's approval of these arguments",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: spec([]string{"helper"}, nil, ""), Receiver: &receiver},
			want: DelegationDecision{Refused: "your configuration asks before dots.delegate and no person approved this request"},
		},
		"asks with approval": {
			reason: "approved, the request goes",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: spec([]string{"helper"}, nil, ""), Receiver: &receiver, Approved: true},
			want: DelegationDecision{Depth: 1},
		},
		"denied": {
			reason: "a denied permission refuses whatever the approvals",
			args:   args, facts: DelegationFacts{Asker: "boss", AskerSpec: spec([]string{"helper"}, nil, "deny"), Receiver: &receiver, Approved: true},
			want: DelegationDecision{Refused: "your configuration denies dots.delegate"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := DecideDelegation(c.args, c.facts)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("%s\nDecideDelegation(%+v) (-want +got):\n%s", c.reason, c.args, d)
			}
		})
	}
}

func TestParseDelegationArgs(t *testing.T) {
	cases := map[string]struct {
		raw     string
		want    DelegationArgs
		wantErr string
	}{
		"full":        {raw: `{"dot":"helper","description":"do it","priority":5}`, want: DelegationArgs{Dot: "helper", Description: "do it", Priority: 5}},
		"empty":       {raw: `{"dot":"helper","description":"  "}`, wantErr: "description is empty"},
		"priority":    {raw: `{"dot":"helper","description":"x","priority":500}`, wantErr: "outside -100..100"},
		"nul":         {raw: `{"dot":"helper","description":"a\u0000b"}`, wantErr: "NUL"},
		"not an args": {raw: `[1]`, wantErr: "do not read"},
		"bad dot":     {raw: `{"dot":"Not A Dot","description":"x"}`, wantErr: "names no Dot"},
		"too long":    {raw: `{"dot":"helper","description":"` + strings.Repeat("x", 20001) + `"}`, wantErr: "longer than 20000"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDelegationArgs(json.RawMessage(c.raw))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ParseDelegationArgs(%.60s) error = %v, want %q", c.raw, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("ParseDelegationArgs(%s) = %+v, %v; want %+v", c.raw, got, err, c.want)
			}
		})
	}
}

func TestDelegationNames(t *testing.T) {
	a := DelegatedTaskName("helper", "uid-1", 7)
	if a != DelegatedTaskName("helper", "uid-1", 7) {
		t.Errorf("the same call names two Tasks")
	}
	if a == DelegatedTaskName("helper", "uid-1", 8) || a == DelegatedTaskName("helper", "uid-2", 7) {
		t.Errorf("two calls name one Task: %s", a)
	}
	if !strings.HasPrefix(a, "helper-from-") || len(a) != len("helper-from-")+10 {
		t.Errorf("DelegatedTaskName = %q, want helper-from-<10 hex>", a)
	}
	if got := DelegationDecisionID("u", 3); got != "delegation-u-3" {
		t.Errorf("DelegationDecisionID = %q", got)
	}
	if got := DelegationAnswerID("c"); got != "delegation-c" {
		t.Errorf("DelegationAnswerID = %q", got)
	}
}

func TestConsent(t *testing.T) {
	asker := dotsv1.DotSpec{Delegation: &dotsv1.DotDelegation{CanAsk: []string{"helper"}}}
	accepts := dotsv1.DotSpec{Delegation: &dotsv1.DotDelegation{AcceptsFrom: []string{"boss"}}}
	cases := map[string]struct {
		asker    dotsv1.DotSpec
		receiver *dotsv1.DotSpec
		wantOK   bool
		wantWhy  string
	}{
		"both":             {asker, &accepts, true, ""},
		"asker took back":  {dotsv1.DotSpec{}, &accepts, false, "your delegation.canAsk no longer names helper"},
		"receiver took it": {asker, &dotsv1.DotSpec{}, false, "helper no longer accepts requests from you"},
		"receiver gone":    {asker, nil, false, "helper is gone"},
	}
	for name, c := range cases {
		ok, why := Consent("boss", c.asker, "helper", c.receiver)
		if ok != c.wantOK || why != c.wantWhy {
			t.Errorf("%s: Consent = %v, %q; want %v, %q", name, ok, why, c.wantOK, c.wantWhy)
		}
	}
}
