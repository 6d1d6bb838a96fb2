package tools

import (
	"context"
	"fmt"

	"github.com/invisible-dots/invisible-dots/guest/engine/images"
)

// screenshot is computer_screenshot: the desktop as dot-agentd takes it,
// shown to the model and not stored (ref 6 "Screenshots").
func (r *Runner) screenshot(ctx context.Context) Result {
	png, err := r.files.Screenshot(ctx)
	if err != nil {
		return fail(fmt.Sprintf("The screenshot could not be taken: %v.", err))
	}
	text, urls := images.Attach("The desktop:", []images.Raw{{MIME: "image/png", Data: png}})
	if len(urls) == 0 {
		return fail(text)
	}
	return Result{Text: text, OK: true, ImageURLs: urls}
}
