package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Approvals is how the hub reads and answers a Dot's approvals: through
// the control plane's Approval resources, the one way an approval is
// answered (so a press after the web answered is "answered already").
type Approvals interface {
	// Pending are the Dot's approvals still asked, oldest first.
	Pending(ctx context.Context, dot store.Dot) ([]Asked, error)
	// Outcome is where the approval id of dot stands.
	Outcome(ctx context.Context, dot store.Dot, id string) (Outcome, error)
	// Answer decides the approval id of dot, as by says who (the field
	// manager of the write). It returns OutcomeApproved or
	// OutcomeRejected when this answer decided it, and the approval's
	// outcome otherwise with ErrAnswered.
	Answer(ctx context.Context, dot store.Dot, id string, approve bool, by string) (Outcome, error)
}

// ErrAnswered: the approval was decided already, or no longer waits.
var ErrAnswered = errors.New("the approval was answered already")

// Asked is an approval a Dot asks for.
type Asked struct {
	// ID is the guest's id of the request (approval.requested's
	// approval_id).
	ID         string
	TaskID     string
	Tool       string
	Permission string
	Reason     string
	Arguments  json.RawMessage
}

// Outcome is where an approval stands.
type Outcome int

const (
	OutcomeUnknown Outcome = iota
	OutcomePending
	OutcomeApproved
	OutcomeRejected
	// OutcomeExpired: its task (or, for a namespace's spend question, its
	// day) ended before anyone answered.
	OutcomeExpired
)

// Prompter shows approval prompts in a chat and edits them to their
// outcome. An adapter whose channel has no buttons says ApprovalsByText.
type Prompter interface {
	// SendApproval sends text with an Approve and a Reject button for
	// approval id (a channel without buttons sends text alone) and
	// returns the channel's id of the message.
	SendApproval(ctx context.Context, chat, text, approvalID string) (ref string, err error)
	// EditApproval replaces the prompt's words and takes its buttons
	// away; a prompt that is gone or says the same already counts as done.
	EditApproval(ctx context.Context, chat, ref, text string) error
}

// byText is an adapter whose channel has no buttons (WhatsApp): its
// prompts end with the words that answer them, which the hub reads.
type byText interface{ ApprovalsByText() bool }

// maxPromptPart bounds the reason and the arguments in a prompt (ref 9.8):
// a chat is read by a third party.
const maxPromptPart = 300

// The hub's words about approvals in a chat.
const (
	saidApproved     = "Approved."
	saidRejected     = "Rejected."
	saidAnswered     = "It was answered already."
	saidNoSuch       = "That request does not exist."
	saidNoLonger     = "No longer needed: the task or the day it was for has ended."
	saidOutOfDate    = "This button is out of date: answer in the web client."
	saidNotOwner     = "Only the Dot's owners answer its requests."
	saidApprovalsOff = "Requests are not answered in this chat now: answer in the web client."
	saidShared       = "Two requests share that code: answer in the web client."
)

// Prompts are one binding's approval prompts: sent to every owner when the
// Dot asks, edited to the outcome whoever gave it, answered by a press or
// (a channel without buttons) in words.
type Prompts struct {
	Binding   Binding
	Store     *store.Store
	Approvals Approvals
	Send      Prompter
	// On says approvals are asked in the chats (the Channel's settings).
	On bool
	// ShowArguments puts the call's arguments in a prompt.
	ShowArguments bool
	Log           logr.Logger
}

func (p *Prompts) byText() bool {
	t, ok := p.Send.(byText)
	return ok && t.ApprovalsByText()
}

// textCode is the code a prompt without buttons is answered with: the last
// six characters of the approval's id.
func textCode(id string) string {
	id = strings.ToLower(id)
	if len(id) > 6 {
		id = id[len(id)-6:]
	}
	return "ap-" + id
}

// promptText is a prompt's words: what the Dot wants to do and the
// permission with its risk, in the words of the web client's approval card
// (protocol.Permissions, the one table both read), the reason and the
// arguments cut to 300 characters.
func (p *Prompts) promptText(a Asked) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s asks to use %s.\n", p.Binding.Dot.Name, a.Tool)
	if info, ok := protocol.LookupPermission(a.Permission); ok {
		fmt.Fprintf(&b, "Permission: %s: %s.\n", eventtext.PermissionPhrase(a.Permission), info.Description)
	} else if _, ok := protocol.MCPServerOfPermission(a.Permission); ok {
		fmt.Fprintf(&b, "Permission: %s: every tool of that server.\n", eventtext.PermissionPhrase(a.Permission))
	} else {
		fmt.Fprintf(&b, "Permission: %s.\n", eventtext.PermissionPhrase(a.Permission))
	}
	if protocol.DestructiveCall(a.Permission, a.Tool, a.Arguments) {
		b.WriteString("This is destructive: check it before you approve.\n")
	}
	if r := strings.TrimSpace(a.Reason); r != "" {
		fmt.Fprintf(&b, "Reason: %s\n", eventtext.Cut(r, maxPromptPart))
	}
	if p.ShowArguments && len(a.Arguments) > 0 && string(a.Arguments) != "null" {
		fmt.Fprintf(&b, "Arguments: %s\n", eventtext.Cut(eventtext.ArgumentsText(a.Arguments), maxPromptPart))
	}
	if p.byText() {
		code := textCode(a.ID)
		fmt.Fprintf(&b, "Reply \"yes %s\" to approve or \"no %s\" to reject.", code, code)
	}
	return strings.TrimSpace(b.String())
}

// outcomeText is what a prompt says once settled.
func outcomeText(body string, o Outcome) string {
	switch o {
	case OutcomeApproved:
		return body + "\n\nApproved."
	case OutcomeRejected:
		return body + "\n\nRejected."
	case OutcomeExpired:
		return body + "\n\n" + saidNoLonger
	}
	return body + "\n\nAnswered elsewhere."
}

// Ask sends a prompt for a to every owner who has none; sent says one was
// sent. A send that fails returns its error (the way out retries it); one
// the channel refuses for good is dropped.
func (p *Prompts) Ask(ctx context.Context, a Asked) (bool, error) {
	if !p.On || p.Approvals == nil {
		return false, nil
	}
	// A request the log reads again after it was answered (a channel that
	// starts behind the log) is not asked: its answer follows in the log.
	if o, err := p.Approvals.Outcome(ctx, p.Binding.Dot, a.ID); err != nil {
		return false, err
	} else if o != OutcomePending && o != OutcomeUnknown {
		return false, nil
	}
	peers, err := p.Store.Peers(ctx, p.Binding.UID)
	if err != nil {
		return false, err
	}
	body := p.promptText(a)
	sent := false
	for _, peer := range peers {
		if peer.Role != store.PeerOwner {
			continue
		}
		have, err := p.Store.HasPrompt(ctx, p.Binding.UID, a.ID, peer.ID)
		if err != nil || have {
			if err != nil {
				return sent, err
			}
			continue
		}
		ref, err := p.Send.SendApproval(ctx, peer.Chat, body, a.ID)
		if errors.Is(err, channels.ErrRefused) {
			p.Log.Info("the channel refused an approval prompt for good; it is dropped", "channel", p.Binding.UID, "reason", err.Error())
			continue
		}
		if err != nil {
			return sent, err
		}
		sent = true
		if err := p.Store.AddPrompt(ctx, store.Prompt{
			Binding: p.Binding.UID, DotUID: p.Binding.Dot.UID, ApprovalID: a.ID, TaskID: a.TaskID,
			PeerID: peer.ID, Chat: peer.Chat, Ref: ref, Body: body,
		}); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// Settle edits the open prompts of approvalID (or, with approvalID empty,
// of every approval of taskID) to the outcome, and marks them settled.
func (p *Prompts) Settle(ctx context.Context, approvalID, taskID string, o Outcome) (bool, error) {
	if approvalID == "" && taskID == "" {
		return false, nil
	}
	open, err := p.Store.OpenPrompts(ctx, p.Binding.UID, approvalID, taskID)
	if err != nil {
		return false, err
	}
	edited := false
	for _, pr := range open {
		err := p.Send.EditApproval(ctx, pr.Chat, pr.Ref, outcomeText(pr.Body, o))
		if err != nil && !errors.Is(err, channels.ErrRefused) {
			return edited, err
		}
		edited = true
		if err := p.Store.SettlePrompt(ctx, p.Binding.UID, pr.ApprovalID, pr.PeerID); err != nil {
			return edited, err
		}
	}
	return edited, nil
}

// Sync brings the prompts up to date (at the channel's start, when a
// person pairs): a prompt whose approval was settled meanwhile is edited,
// and a pending approval without a prompt in an owner's chat is sent one.
func (p *Prompts) Sync(ctx context.Context) error {
	if p.Approvals == nil {
		return nil
	}
	open, err := p.Store.OpenPrompts(ctx, p.Binding.UID, "", "")
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, pr := range open {
		if seen[pr.ApprovalID] {
			continue
		}
		seen[pr.ApprovalID] = true
		o, err := p.Approvals.Outcome(ctx, p.Binding.Dot, pr.ApprovalID)
		if err != nil {
			return err
		}
		if o != OutcomePending {
			if _, err := p.Settle(ctx, pr.ApprovalID, "", o); err != nil {
				return err
			}
		}
	}
	if !p.On {
		return nil
	}
	pending, err := p.Approvals.Pending(ctx, p.Binding.Dot)
	if err != nil {
		return err
	}
	for _, a := range pending {
		if _, err := p.Ask(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// owner is the paired owner who pressed or wrote, false for anyone else.
func (p *Prompts) owner(ctx context.Context, peer string, private bool) (store.Peer, bool, error) {
	if !private || peer == "" {
		return store.Peer{}, false, nil
	}
	pr, ok, err := p.Store.PeerOf(ctx, p.Binding.UID, peer)
	if err != nil || !ok || pr.Role != store.PeerOwner {
		return store.Peer{}, false, err
	}
	return pr, true, nil
}

// Press answers a button pressed in a chat: only a paired owner in their
// private chat, on a button of this version, for an approval of this
// binding's Dot still asked in chats. The notice is what the person is
// told; the prompts are edited when the answer arrives in the log.
func (p *Prompts) Press(ctx context.Context, press channels.Press) (string, error) {
	approve, id, ok := channels.ParseButtonData(press.Data)
	if !ok {
		return saidOutOfDate, nil
	}
	peer, ok, err := p.owner(ctx, press.Peer, press.Private)
	if err != nil {
		return "", err
	}
	if !ok {
		return saidNotOwner, nil
	}
	return p.answer(ctx, peer, id, approve)
}

// A prompt goes out as the Dot's log asks, and the Approval it answers is
// made from the log a moment later (a few seconds on a busy server): a
// press on a prompt this chat was sent waits for it, up to
// approvalMadeWait, asking every approvalMadeEvery. Without the wait, a
// quick press was told the request did not exist, and was lost.
var (
	approvalMadeWait  = 15 * time.Second
	approvalMadeEvery = 200 * time.Millisecond
)

// answer decides approval id for peer, in words for the person.
func (p *Prompts) answer(ctx context.Context, peer store.Peer, id string, approve bool) (string, error) {
	if !p.On || p.Approvals == nil {
		return saidApprovalsOff, nil
	}
	by := p.Binding.Kind + ":" + peer.ID
	o, err := p.Approvals.Answer(ctx, p.Binding.Dot, id, approve, by)
	if o == OutcomeUnknown && errors.Is(err, ErrAnswered) {
		asked, askErr := p.Store.HasPrompt(ctx, p.Binding.UID, id, peer.ID)
		if askErr != nil {
			return "", askErr
		}
		if asked {
			o, err = p.answerOnceMade(ctx, id, approve, by)
		}
	}
	switch {
	case errors.Is(err, ErrAnswered):
		if o == OutcomeExpired {
			return saidNoLonger, nil
		}
		if o == OutcomeUnknown {
			return saidNoSuch, nil
		}
		return saidAnswered, nil
	case err != nil:
		return "", err
	case o == OutcomeApproved:
		return saidApproved, nil
	case o == OutcomeRejected:
		return saidRejected, nil
	}
	return saidNoSuch, nil
}

// answerOnceMade answers approval id as soon as its Approval is made, or
// says it is unknown after approvalMadeWait.
func (p *Prompts) answerOnceMade(ctx context.Context, id string, approve bool, by string) (Outcome, error) {
	deadline := time.NewTimer(approvalMadeWait)
	defer deadline.Stop()
	tick := time.NewTicker(approvalMadeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return OutcomeUnknown, ctx.Err()
		case <-deadline.C:
			return OutcomeUnknown, ErrAnswered
		case <-tick.C:
		}
		o, err := p.Approvals.Answer(ctx, p.Binding.Dot, id, approve, by)
		if o != OutcomeUnknown || !errors.Is(err, ErrAnswered) {
			return o, err
		}
	}
}

// Words reads a message that is exactly an answer in words ("yes
// ap-xxxxxx" or "no ap-xxxxxx"), on a channel without buttons, from a
// paired owner: handled is false for anything else (a bare "yes" is a
// message to the Dot), and notice is what the person is told.
func (p *Prompts) Words(ctx context.Context, peer store.Peer, text string) (handled bool, notice string, err error) {
	if !p.byText() || peer.Role != store.PeerOwner {
		return false, "", nil
	}
	word, code, ok := strings.Cut(strings.ToLower(strings.TrimSpace(text)), " ")
	if !ok || (word != "yes" && word != "no") || !strings.HasPrefix(code, "ap-") || len(code) != len("ap-")+6 {
		return false, "", nil
	}
	if !p.On || p.Approvals == nil {
		return true, saidApprovalsOff, nil
	}
	pending, err := p.Approvals.Pending(ctx, p.Binding.Dot)
	if err != nil {
		return true, "", err
	}
	var match []string
	for _, a := range pending {
		if textCode(a.ID) == code {
			match = append(match, a.ID)
		}
	}
	switch len(match) {
	case 0:
		// Settled already, or never asked here.
		asked, err := p.askedHere(ctx, code)
		if err != nil {
			return true, "", err
		}
		if asked {
			return true, saidAnswered, nil
		}
		return true, saidNoSuch, nil
	case 1:
		notice, err := p.answer(ctx, peer, match[0], word == "yes")
		return true, notice, err
	}
	return true, saidShared, nil
}

// askedHere says whether a prompt with code was ever sent through the
// binding (settled since).
func (p *Prompts) askedHere(ctx context.Context, code string) (bool, error) {
	all, err := p.Store.Prompts(ctx, p.Binding.UID)
	if err != nil {
		return false, err
	}
	for _, pr := range all {
		if textCode(pr.ApprovalID) == code {
			return true, nil
		}
	}
	return false, nil
}
