package wire

import (
	"encoding/json"
	"strings"
)

// The OpenAI-compatible endpoint (DESIGN.md 2, "programs' doors"): any
// OpenAI client pointed at https://HOST:PORT/v1 with a person's token lists
// the Dots it may chat with as models and chats with them. The shapes below
// are the part of OpenAI's chat completions the endpoint reads and writes;
// fields a client sends that are not here (temperature, tools...) are read
// past, since a Dot chooses its own model and tools.
const (
	// OpenAIPrefix is the endpoint's path prefix, beside Prefix on the same
	// port.
	OpenAIPrefix = "/v1/"
	// OpenAIModelsPath lists the Dots the caller may chat with.
	OpenAIModelsPath = OpenAIPrefix + "models"
	// OpenAIChatPath says a message to a Dot and answers with its reply.
	OpenAIChatPath = OpenAIPrefix + "chat/completions"
	// MaxOpenAIChatBody is the largest body of a chat completion request, in
	// bytes: a client sends its whole history, of which the newest user
	// message alone is said (at most MaxMessageBody).
	MaxOpenAIChatBody = 2 << 20
)

// IsOpenAILongRunningPath says whether path is a request of the endpoint
// that outlives the API server's request timeout: a chat completion waits
// for the Dot's answer, streamed or whole.
func IsOpenAILongRunningPath(path string) bool {
	return strings.TrimSuffix(path, "/") == OpenAIChatPath
}

// OpenAIModel is one Dot as a model: its id is "<namespace>/<name>".
type OpenAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"` // the Dot's namespace
}

// OpenAIModelList answers GET OpenAIModelsPath.
type OpenAIModelList struct {
	Object string        `json:"object"` // "list"
	Data   []OpenAIModel `json:"data"`
}

// OpenAIChatRequest is the body of POST OpenAIChatPath, as much of it as
// the endpoint reads.
type OpenAIChatRequest struct {
	Model         string                   `json:"model"`
	Messages      []OpenAIChatMessage      `json:"messages"`
	Stream        bool                     `json:"stream,omitempty"`
	StreamOptions *OpenAIChatStreamOptions `json:"stream_options,omitempty"`
	// N, when given, must be 1: a Dot gives one answer.
	N *int `json:"n,omitempty"`
}

// OpenAIChatStreamOptions are a streamed request's options.
type OpenAIChatStreamOptions struct {
	// IncludeUsage asks for a last chunk, with no choices, holding the
	// usage.
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// OpenAIChatMessage is one message of a request's history. Content is a
// string or an array of parts (OpenAIContentPart); only text is taken.
type OpenAIChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name,omitempty"`
}

// OpenAIContentPart is one part of an array content.
type OpenAIContentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// The roles and part types the endpoint reads.
const (
	OpenAIRoleUser      = "user"
	OpenAIRoleAssistant = "assistant"
	OpenAIPartText      = "text"
)

// OpenAIChatCompletion answers a whole (not streamed) chat completion.
type OpenAIChatCompletion struct {
	ID      string             `json:"id"`     // "chatcmpl-<event id>"
	Object  string             `json:"object"` // "chat.completion"
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []OpenAIChatChoice `json:"choices"`
	Usage   *OpenAIUsage       `json:"usage,omitempty"`
}

// OpenAIChatChoice is the one choice of a completion.
type OpenAIChatChoice struct {
	Index        int                    `json:"index"`
	Message      OpenAIAssistantMessage `json:"message"`
	FinishReason string                 `json:"finish_reason"`
}

// OpenAIAssistantMessage is the Dot's answer.
type OpenAIAssistantMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Refusal is always null: a Dot's refusal is its answer's text.
	Refusal *string `json:"refusal"`
}

// OpenAIChatChunk is one chunk of a streamed chat completion
// ("chat.completion.chunk"): the same id, created and model on each.
type OpenAIChatChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []OpenAIChatChunkChoice `json:"choices"`
	// Usage is on the last chunk alone, with no choices, when the request
	// asked for it (stream_options.include_usage); null on the others.
	Usage *OpenAIUsage `json:"usage"`
}

// OpenAIChatChunkChoice is the one choice of a chunk.
type OpenAIChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        OpenAIChatDelta `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
}

// OpenAIChatDelta is what a chunk adds to the answer.
type OpenAIChatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// OpenAIUsage is what the answer cost. The Dot's log records its spend in
// USD (spent_usd) and the reasoning tokens the model reported, not the
// prompt's and completion's tokens: those counts are 0, the spend is Cost
// (as OpenRouter's usage.cost says it) and the reasoning tokens are in
// CompletionTokensDetails.
type OpenAIUsage struct {
	PromptTokens            int64                          `json:"prompt_tokens"`
	CompletionTokens        int64                          `json:"completion_tokens"`
	TotalTokens             int64                          `json:"total_tokens"`
	CompletionTokensDetails *OpenAICompletionTokensDetails `json:"completion_tokens_details,omitempty"`
	// Cost is the Dot's spend on this answer, in USD.
	Cost float64 `json:"cost"`
}

// OpenAICompletionTokensDetails breaks the completion's tokens down.
type OpenAICompletionTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// OpenAIErrorBody is every failure of the endpoint, in OpenAI's shape.
type OpenAIErrorBody struct {
	Error OpenAIError `json:"error"`
}

// OpenAIError says what failed: Type is OpenAI's class of the failure,
// Code the particular one, Param the field of the request at fault.
type OpenAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// The types and codes of the endpoint's failures.
const (
	OpenAITypeInvalidRequest = "invalid_request_error"
	OpenAITypePermission     = "permission_error"
	OpenAITypeAuthentication = "authentication_error"
	OpenAITypeServer         = "server_error"
	OpenAITypeTimeout        = "timeout_error"
	OpenAITypeRateLimit      = "rate_limit_error"

	OpenAICodeModelNotFound      = "model_not_found"
	OpenAICodeUnsupportedContent = "unsupported_content"
	OpenAICodeNoUserMessage      = "no_user_message"
	OpenAICodeAnswerTimeout      = "answer_timeout"
	OpenAICodeRateLimit          = "rate_limit_exceeded"
)

// OpenAIModelID is the model id of the Dot namespace/name.
func OpenAIModelID(namespace, name string) string { return namespace + "/" + name }
