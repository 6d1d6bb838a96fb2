package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// DelegateTool is the guest's tool that asks another Dot for a task
// (guest/engine/tools) and DelegatePermission the permission it exercises.
const (
	DelegateTool       = "delegate_task"
	DelegatePermission = "dots.delegate"
)

// DelegationArgs are delegate_task's arguments as its tool.called carries
// them.
type DelegationArgs struct {
	Dot         string `json:"dot"`
	Description string `json:"description"`
	Priority    int32  `json:"priority"`
}

// ParseDelegationArgs reads delegate_task's arguments; an error says in words
// why they cannot make a Task.
func ParseDelegationArgs(raw json.RawMessage) (DelegationArgs, error) {
	var a DelegationArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return DelegationArgs{}, fmt.Errorf("its arguments do not read: %v", err)
	}
	switch {
	case !dotNameRe.MatchString(a.Dot):
		return DelegationArgs{}, fmt.Errorf("it names no Dot (a name is 1 to 40 of a-z, 0-9 and -)")
	case strings.TrimSpace(a.Description) == "":
		return a, fmt.Errorf("its description is empty")
	case utf8.RuneCountInString(a.Description) > maxTaskDescription:
		return a, fmt.Errorf("its description is longer than %d characters", maxTaskDescription)
	case strings.ContainsRune(a.Description, 0):
		return a, fmt.Errorf("its description holds a NUL character")
	case a.Priority < -100 || a.Priority > 100:
		return a, fmt.Errorf("its priority %d is outside -100..100", a.Priority)
	}
	return a, nil
}

var dotNameRe = regexp.MustCompile(protocol.NamePattern)

// maxTaskDescription is a Task's description's bound (its CRD's MaxLength).
const maxTaskDescription = 20000

// DelegationFacts is what the decision on one request reads, at the moment
// it is decided.
type DelegationFacts struct {
	// Asker is the asking Dot's name and AskerSpec its spec now.
	Asker     string
	AskerSpec dotsv1.DotSpec
	// Receiver is the asked Dot's spec now; nil when no Dot of that name is
	// in the namespace.
	Receiver *dotsv1.DotSpec
	// ParentDepth is the depth of the asker's task the request was made
	// in: 0 for a task nobody delegated, or for the chat.
	ParentDepth int32
	// Open counts the asker's requests whose Tasks have not ended.
	Open int
	// Approved: a person approved a call of delegate_task with these very
	// arguments (needed when the asker's config asks).
	Approved bool
}

// DelegationDecision is what to do with one request: make the receiver's
// Task at Depth, or refuse it for Refused (words the asker is told).
type DelegationDecision struct {
	Depth   int32
	Refused string
}

// DecideDelegation decides one delegate_task call the guest reported (its
// tool.called): the host checks again, at this moment, what the guest
// checked and what only the host knows. Both Dots must consent (the asker's
// canAsk names the receiver and the receiver's acceptsFrom names the
// asker), the asker's config must let the call through (allow, or ask with
// a person's approval of the same arguments), and the tree stays within
// MaxDelegationDepth and the asker within MaxDelegationFanOut open requests.
func DecideDelegation(args DelegationArgs, f DelegationFacts) DelegationDecision {
	refuse := func(format string, a ...any) DelegationDecision {
		return DelegationDecision{Refused: fmt.Sprintf(format, a...)}
	}
	receiver := args.Dot
	switch {
	case receiver == f.Asker:
		return refuse("a Dot cannot ask itself")
	case !f.AskerSpec.CanAskDot(receiver):
		return refuse("your delegation.canAsk does not name %s", receiver)
	case f.Receiver == nil:
		return refuse("there is no Dot named %s in your namespace", receiver)
	case !f.Receiver.AcceptsFromDot(f.Asker):
		return refuse("%s does not accept requests from you (its delegation.acceptsFrom does not name %s)", receiver, f.Asker)
	}
	switch SpecPermission(f.AskerSpec, DelegatePermission) {
	case protocol.Deny:
		return refuse("your configuration denies %s", DelegatePermission)
	case protocol.Ask:
		if !f.Approved {
			return refuse("your configuration asks before %s and no person approved this request", DelegatePermission)
		}
	}
	depth := f.ParentDepth + 1
	if depth > dotsv1.MaxDelegationDepth {
		return refuse("the request would be %d deep; a request made for another Dot may be at most %d deep", depth, dotsv1.MaxDelegationDepth)
	}
	if f.Open >= dotsv1.MaxDelegationFanOut {
		return refuse("you have %d requests open already, the most a Dot may have; wait for an answer", f.Open)
	}
	return DelegationDecision{Depth: depth}
}

// SpecPermission is the decision a Dot's spec gives the permission name,
// its default applied (protocol.ResolvePermission).
func SpecPermission(spec dotsv1.DotSpec, name string) protocol.Decision {
	listed := make(map[string]protocol.Decision, len(spec.Permissions))
	for k, d := range spec.Permissions {
		listed[k] = protocol.Decision(d)
	}
	return protocol.ResolvePermission(name, listed, nil)
}

// DelegatedTaskName is the name of the receiver's Task made for the asker's
// call logged as event eventID: the same call always names the same Task
// (DESIGN.md 4), so making it again finds it made.
func DelegatedTaskName(receiver, askerUID string, eventID int64) string {
	sum := sha256.Sum256([]byte(askerUID + "/" + strconv.FormatInt(eventID, 10)))
	return receiver + "-from-" + hex.EncodeToString(sum[:])[:10]
}

// DelegationDecisionID is the outbox id of the system.event that tells the
// asker what became of its call logged as event eventID (passed on or
// refused); it is also the record that the call was decided.
func DelegationDecisionID(askerUID string, eventID int64) string {
	return "delegation-" + askerUID + "-" + strconv.FormatInt(eventID, 10)
}

// DelegationAnswerID is the outbox id of the system.event that brings the
// asker the end of the receiver's Task of uid childUID.
func DelegationAnswerID(childUID string) string { return "delegation-" + childUID }

// DelegationRevokedID is the outbox id of the system.event that tells the
// asker its request (the Task of uid childUID) was cancelled because a Dot
// took its consent back.
func DelegationRevokedID(childUID string) string { return "delegation-revoked-" + childUID }

// Consent says whether the pair asker -> receiver may delegate now, and if
// not, why, in words for the asker.
func Consent(asker string, askerSpec dotsv1.DotSpec, receiver string, receiverSpec *dotsv1.DotSpec) (bool, string) {
	switch {
	case !askerSpec.CanAskDot(receiver):
		return false, fmt.Sprintf("your delegation.canAsk no longer names %s", receiver)
	case receiverSpec == nil:
		return false, fmt.Sprintf("%s is gone", receiver)
	case !receiverSpec.AcceptsFromDot(asker):
		return false, fmt.Sprintf("%s no longer accepts requests from you", receiver)
	}
	return true, ""
}

// DelegationAnswer is the system.event data that brings the asker the end
// of the receiver's task: its answer, its failure or its cancellation.
func DelegationAnswer(receiver, task string, phase dotsv1.TaskPhase, summary, errText string) protocol.Delegation {
	var text string
	switch phase {
	case dotsv1.TaskCompleted:
		text = fmt.Sprintf("%s answered your request (its task %s): %s", receiver, task, cut(summary, maxAnswer))
	case dotsv1.TaskFailed:
		text = fmt.Sprintf("%s could not do your request (its task %s failed): %s", receiver, task, cut(errText, maxAnswer))
	default:
		text = fmt.Sprintf("%s's task %s for your request was cancelled.", receiver, task)
	}
	return protocol.Delegation{Dot: receiver, Task: task, Outcome: string(phase), Text: text}
}

// maxAnswer is the most of a summary or an error the asker is told, in
// characters; the rest stays on the receiver's Task.
const maxAnswer = 16000

func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
