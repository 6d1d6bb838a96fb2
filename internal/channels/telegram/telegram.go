// Package telegram is the Telegram adapter of the channel hub (ref 9.8):
// transport only, on github.com/go-telegram/bot (MIT) for the Bot API's
// calls and types. The hub holds every policy (who may talk, how much,
// what becomes of a press); this package connects, delivers and words the
// Bot API's failures as the hub's errors.
//
// It polls (the control plane sits behind NAT; polling needs only
// outbound HTTPS) with a loop of its own: the library's loop confirms an
// update (moves the offset) as it receives it, and an update must be
// confirmed only after the hub dealt with it, so that a failure makes
// Telegram offer it again. The token is in every request URL: no error
// this package returns holds it.
package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
)

const (
	// DefaultAPI is the Bot API's address; the server's
	// INVISIBLE_DOTS_TELEGRAM_API moves it (a test's fake).
	DefaultAPI = "https://api.telegram.org"
	// MaxText is where an answer is split: Telegram takes 4096, and
	// counts differently from Go for some characters.
	MaxText = 4000
	// pollSeconds is how long a getUpdates waits for news.
	pollSeconds = 25
)

// Adapter is one bot's link.
type Adapter struct {
	token string
	base  string
	bot   *bot.Bot
	poll  *http.Client
	// botID prefixes an update's id in a message's ExternalID: update ids
	// of two bots overlap, and a Dot's bot can be replaced.
	botID  string
	offset int64
}

// New makes the adapter of a bot whose token was checked (Check); it makes
// no call.
func New(token, apiBase string, account channels.Account) (*Adapter, error) {
	if apiBase == "" {
		apiBase = DefaultAPI
	}
	b, err := bot.New(token, bot.WithServerURL(strings.TrimSuffix(apiBase, "/")), bot.WithSkipGetMe(),
		bot.WithHTTPClient(30*time.Second, &http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		return nil, errors.New("the Telegram token is empty")
	}
	return &Adapter{
		token: token, base: strings.TrimSuffix(apiBase, "/"), bot: b,
		poll:  &http.Client{Timeout: (pollSeconds + 10) * time.Second},
		botID: account.ID,
	}, nil
}

// Check asks Telegram who the token is (getMe) before anything is stored:
// channels.ErrInvalidCredentials for a token Telegram refuses, another
// error (never holding the token) when Telegram cannot be reached.
func Check(ctx context.Context, token, apiBase string) (channels.Account, error) {
	if apiBase == "" {
		apiBase = DefaultAPI
	}
	if strings.TrimSpace(token) == "" || strings.ContainsAny(token, " \t\r\n/") {
		return channels.Account{}, fmt.Errorf("%w: a bot token is one word, as @BotFather gave it", channels.ErrInvalidCredentials)
	}
	b, err := bot.New(token, bot.WithServerURL(strings.TrimSuffix(apiBase, "/")), bot.WithSkipGetMe(),
		bot.WithHTTPClient(15*time.Second, &http.Client{Timeout: 15 * time.Second}))
	if err != nil {
		return channels.Account{}, fmt.Errorf("%w: the token is empty", channels.ErrInvalidCredentials)
	}
	me, err := b.GetMe(ctx)
	if err != nil {
		if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
			return channels.Account{}, fmt.Errorf("%w: Telegram does not know this bot token (copy it again from @BotFather)", channels.ErrInvalidCredentials)
		}
		return channels.Account{}, fmt.Errorf("Telegram could not be asked who the bot is: %s", channels.Scrub(err.Error(), token))
	}
	if !me.IsBot {
		return channels.Account{}, fmt.Errorf("%w: the token is not a bot's", channels.ErrInvalidCredentials)
	}
	return channels.Account{ID: strconv.FormatInt(me.ID, 10), Name: me.Username}, nil
}

// Run connects (the bot's webhook, if it had one, is deleted: the bot is
// the Dot's own) and hands every message and button press to sink until
// ctx ends or the link fails. An update is confirmed only after sink dealt
// with it. It returns channels.ErrNeedsRelink for a revoked token and
// channels.ErrAnotherPoller when another program polls the bot; the hub
// starts it again after any other error.
func (a *Adapter) Run(ctx context.Context, sink channels.Sink) error {
	if _, err := a.bot.DeleteWebhook(ctx, &bot.DeleteWebhookParams{}); err != nil {
		return a.failure("connect", err)
	}
	sink.Connected()
	for {
		updates, err := a.getUpdates(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, u := range updates {
			if err := a.deliver(ctx, sink, u); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			// Confirmed at the next poll.
			a.offset = u.ID + 1
		}
	}
}

func (a *Adapter) deliver(ctx context.Context, sink channels.Sink, u models.Update) error {
	switch {
	case u.Message != nil:
		m := u.Message
		if m.From == nil {
			return nil
		}
		in := channels.Inbound{
			Peer:       strconv.FormatInt(m.From.ID, 10),
			Label:      strings.TrimSpace(m.From.FirstName + " " + m.From.LastName),
			Chat:       strconv.FormatInt(m.Chat.ID, 10),
			Private:    m.Chat.Type == models.ChatTypePrivate,
			ExternalID: a.botID + ":" + strconv.FormatInt(u.ID, 10),
			Text:       m.Text,
			HasText:    m.Text != "",
		}
		if m.From.Username != "" && in.Label == "" {
			in.Label = "@" + m.From.Username
		}
		return sink.Inbound(ctx, in)
	case u.CallbackQuery != nil:
		q := u.CallbackQuery
		p := channels.Press{Peer: strconv.FormatInt(q.From.ID, 10), Data: q.Data}
		if q.Message.Message != nil {
			p.Chat = strconv.FormatInt(q.Message.Message.Chat.ID, 10)
			p.Private = q.Message.Message.Chat.Type == models.ChatTypePrivate
		}
		notice, err := sink.Pressed(ctx, p)
		if err != nil {
			return err
		}
		// Always answered, best effort: Telegram refuses an answer to a
		// press that is too old, and the press is dealt with anyway.
		_, _ = a.bot.AnswerCallbackQuery(ctx, &bot.AnswerCallbackQueryParams{CallbackQueryID: q.ID, Text: notice})
	}
	return nil
}

// getUpdates asks for news after the confirmed offset: messages and
// button presses only.
func (a *Adapter) getUpdates(ctx context.Context) ([]models.Update, error) {
	body, _ := json.Marshal(map[string]any{
		"offset": a.offset, "timeout": pollSeconds, "allowed_updates": []string{"message", "callback_query"},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/bot"+a.token+"/getUpdates", bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("make Telegram's getUpdates request")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.poll.Do(req)
	if err != nil {
		return nil, fmt.Errorf("Telegram could not be reached: %s", channels.Scrub(err.Error(), a.token))
	}
	defer resp.Body.Close()
	var out struct {
		OK          bool            `json:"ok"`
		Result      []models.Update `json:"result"`
		ErrorCode   int             `json:"error_code"`
		Description string          `json:"description"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("Telegram's answer to getUpdates was cut: %s", channels.Scrub(err.Error(), a.token))
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("Telegram's answer to getUpdates is not the Bot API's (HTTP %d)", resp.StatusCode)
	}
	if !out.OK {
		desc := channels.Scrub(out.Description, a.token)
		switch out.ErrorCode {
		case http.StatusUnauthorized, http.StatusNotFound:
			return nil, fmt.Errorf("%w (Telegram: %s)", channels.ErrNeedsRelink, desc)
		case http.StatusConflict:
			return nil, fmt.Errorf("%w (Telegram: %s)", channels.ErrAnotherPoller, desc)
		case http.StatusTooManyRequests:
			return nil, &channels.RetryAfterError{After: time.Duration(max(out.Parameters.RetryAfter, 1)) * time.Second}
		}
		return nil, fmt.Errorf("Telegram refused getUpdates (%d): %s", out.ErrorCode, desc)
	}
	return out.Result, nil
}

// noPreview: nothing a Dot names is fetched on its behalf, by Telegram's
// crawler either (ref 9.8).
func noPreview() *models.LinkPreviewOptions {
	return &models.LinkPreviewOptions{IsDisabled: bot.True()}
}

// SendText sends text to chat as plain text, split at MaxText.
func (a *Adapter) SendText(ctx context.Context, chat, text string) error {
	for _, part := range channels.Split(text, MaxText) {
		if _, err := a.bot.SendMessage(ctx, &bot.SendMessageParams{ChatID: chat, Text: part, LinkPreviewOptions: noPreview()}); err != nil {
			return a.failure("send a message", err)
		}
	}
	return nil
}

// SendApproval sends an approval's prompt with its two buttons; the
// message's id is what an edit needs.
func (a *Adapter) SendApproval(ctx context.Context, chat, text, approvalID string) (string, error) {
	yes, err := channels.ButtonData(true, approvalID)
	if err != nil {
		return "", fmt.Errorf("%w: %v", channels.ErrRefused, err)
	}
	no, _ := channels.ButtonData(false, approvalID)
	m, err := a.bot.SendMessage(ctx, &bot.SendMessageParams{
		ChatID: chat, Text: cut(text, MaxText), LinkPreviewOptions: noPreview(),
		ReplyMarkup: &models.InlineKeyboardMarkup{InlineKeyboard: [][]models.InlineKeyboardButton{{
			{Text: "Approve", CallbackData: yes}, {Text: "Reject", CallbackData: no},
		}}},
	})
	if err != nil {
		return "", a.failure("send an approval", err)
	}
	return strconv.Itoa(m.ID), nil
}

// EditApproval rewrites a prompt to its outcome, its buttons taken away.
// A prompt that is gone, or already says the same, counts as edited.
func (a *Adapter) EditApproval(ctx context.Context, chat, ref, text string) error {
	id, err := strconv.Atoi(ref)
	if err != nil {
		return fmt.Errorf("%w: %q is not a Telegram message id", channels.ErrRefused, ref)
	}
	_, err = a.bot.EditMessageText(ctx, &bot.EditMessageTextParams{
		ChatID: chat, MessageID: id, Text: cut(text, MaxText), LinkPreviewOptions: noPreview(),
		ReplyMarkup: &models.InlineKeyboardMarkup{InlineKeyboard: [][]models.InlineKeyboardButton{}},
	})
	if err != nil && (strings.Contains(err.Error(), "message is not modified") || strings.Contains(err.Error(), "message to edit not found")) {
		return nil
	}
	if err != nil {
		return a.failure("edit an approval", err)
	}
	return nil
}

// Typing shows the Dot at work in chat.
func (a *Adapter) Typing(ctx context.Context, chat string) error {
	if _, err := a.bot.SendChatAction(ctx, &bot.SendChatActionParams{ChatID: chat, Action: models.ChatActionTyping}); err != nil {
		return a.failure("show typing", err)
	}
	return nil
}

// failure words a Bot API call's error as the hub's: 401 needs a relink,
// 429 says when to retry, 403, 400 and 404 on a send are final, the rest
// is retried. The token never appears.
func (a *Adapter) failure(what string, err error) error {
	msg := channels.Scrub(err.Error(), a.token)
	var tooMany *bot.TooManyRequestsError
	switch {
	case errors.As(err, &tooMany):
		return &channels.RetryAfterError{After: time.Duration(max(tooMany.RetryAfter, 1)) * time.Second}
	case errors.Is(err, bot.ErrorUnauthorized):
		return fmt.Errorf("%w (Telegram, to %s: %s)", channels.ErrNeedsRelink, what, msg)
	case errors.Is(err, bot.ErrorConflict):
		return fmt.Errorf("%w (Telegram, to %s: %s)", channels.ErrAnotherPoller, what, msg)
	case errors.Is(err, bot.ErrorForbidden), errors.Is(err, bot.ErrorBadRequest), errors.Is(err, bot.ErrorNotFound):
		return fmt.Errorf("%w (Telegram, to %s: %s)", channels.ErrRefused, what, msg)
	}
	return fmt.Errorf("Telegram, to %s: %s", what, msg)
}

// cut bounds a prompt that is not split (it carries the buttons).
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Kind is Telegram as the hub runs it, on the Bot API at apiBase (the
// server's INVISIBLE_DOTS_TELEGRAM_API; DefaultAPI when empty).
func Kind(apiBase string) hub.Kind {
	return hub.Kind{
		Type:     "telegram",
		LinkedBy: hub.LinkedByToken,
		Check:    func(ctx context.Context, token string) (channels.Account, error) { return Check(ctx, token, apiBase) },
		New: func(_ hub.Binding, l hub.Link, _ hub.Device) (hub.Adapter, error) {
			return New(l.Token, apiBase, l.Account)
		},
	}
}
