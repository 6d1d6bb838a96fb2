package images

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"
)

func encoded(t *testing.T, format string, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := 0; x < w; x++ {
		img.Set(x, h/2, color.White)
	}
	var buf bytes.Buffer
	var err error
	if format == "jpeg" {
		err = jpeg.Encode(&buf, img, nil)
	} else {
		err = png.Encode(&buf, img)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFit(t *testing.T) {
	tests := map[string]struct {
		format       string
		w, h         int
		wantMIME     string
		wantW, wantH int
		same         bool
	}{
		"small png kept as it is":   {"png", 800, 600, "image/png", 800, 600, true},
		"wide png sized down":       {"png", 2560, 1440, "image/png", 1280, 720, false},
		"tall jpeg stays a jpeg":    {"jpeg", 1000, 4000, "image/jpeg", 320, 1280, false},
		"exactly the limit is kept": {"jpeg", 1280, 720, "image/jpeg", 1280, 720, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := encoded(t, tc.format, tc.w, tc.h)
			got, err := Fit("image/"+tc.format, in)
			if err != nil {
				t.Fatal(err)
			}
			if got.MIME != tc.wantMIME || got.Width != tc.wantW || got.Height != tc.wantH || bytes.Equal(got.Data, in) != tc.same {
				t.Errorf("Fit(%s %dx%d) = %s %dx%d (same bytes %v), want %s %dx%d (same %v)", tc.format, tc.w, tc.h,
					got.MIME, got.Width, got.Height, bytes.Equal(got.Data, in), tc.wantMIME, tc.wantW, tc.wantH, tc.same)
			}
			cfg, _, err := image.DecodeConfig(bytes.NewReader(got.Data))
			if err != nil || cfg.Width != tc.wantW || cfg.Height != tc.wantH {
				t.Errorf("the bytes decode to %dx%d (%v)", cfg.Width, cfg.Height, err)
			}
		})
	}
}

func TestAttach(t *testing.T) {
	text, urls := Attach("Took it.", []Raw{{MIME: "image/png", Data: encoded(t, "png", 2000, 1000)}, {MIME: "image/png", Data: []byte("not an image")}})
	lines := strings.Split(text, "\n")
	if len(lines) != 3 || lines[0] != "Took it." || lines[1] != "[screenshot, 1280x640, not stored]" ||
		!strings.HasPrefix(lines[2], "[image, image/png, not shown: ") {
		t.Errorf("text = %q", text)
	}
	if len(urls) != 1 || !strings.HasPrefix(urls[0], "data:image/png;base64,") {
		t.Errorf("urls = %d, want one PNG data URL", len(urls))
	}
}

// BenchmarkFit measures sizing a 2560x1440 desktop down for the model.
func BenchmarkFit(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 2560, 1440))
	var buf bytes.Buffer
	png.Encode(&buf, img)
	data := buf.Bytes()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Fit("image/png", data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScaleAveragesWhatShows: a transparent pixel's colour does not bleed
// into its opaque neighbour's (NRGBA is premultiplied as it is read), and
// an opaque NRGBA image, read in place, scales as the same RGBA one does.
func TestScaleAveragesWhatShows(t *testing.T) {
	n := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	n.SetNRGBA(0, 0, color.NRGBA{R: 255, A: 0})
	n.SetNRGBA(1, 0, color.NRGBA{B: 255, A: 255})
	if got, want := scale(n, 1, 1).RGBAAt(0, 0), (color.RGBA{B: 127, A: 127}); got != want {
		t.Errorf("scale(transparent red, opaque blue) = %v, want %v", got, want)
	}
	opaque := image.NewNRGBA(image.Rect(0, 0, 4, 2))
	same := image.NewRGBA(opaque.Rect)
	for x := 0; x < 4; x++ {
		for y := 0; y < 2; y++ {
			c := color.NRGBA{R: uint8(40 * x), G: uint8(100 * y), B: 7, A: 255}
			opaque.SetNRGBA(x, y, c)
			same.Set(x, y, c)
		}
	}
	if got, want := scale(opaque, 2, 1).Pix, scale(same, 2, 1).Pix; !bytes.Equal(got, want) {
		t.Errorf("scale(opaque NRGBA) = %v, scale(RGBA) = %v, want the same", got, want)
	}
}
