package tools

import (
	"bytes"
	"encoding/base64"
	"image"
	_ "image/png"
	"strings"
	"testing"
)

func TestComputerScreenshotIsShownNotStored(t *testing.T) {
	f := newFixture(t)
	res := f.run(t, ComputerScreenshotTool, map[string]any{})
	if !res.OK || res.Text != "The desktop:\n[screenshot, 1280x720, not stored]" || len(res.ImageURLs) != 1 {
		t.Fatalf("computer_screenshot = %+v, want the placeholder and one image", res)
	}
	b64, ok := strings.CutPrefix(res.ImageURLs[0], "data:image/png;base64,")
	if !ok {
		t.Fatalf("image url = %.40q, want a PNG data URL", res.ImageURLs[0])
	}
	raw, _ := base64.StdEncoding.DecodeString(b64)
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || cfg.Width != 1280 || cfg.Height != 720 {
		t.Errorf("the image shown is %dx%d (%v), want the 2560x1440 desktop sized down to 1280x720", cfg.Width, cfg.Height, err)
	}
}
