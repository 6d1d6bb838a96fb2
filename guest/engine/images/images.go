// Package images makes a screenshot fit for a model's context (ref 6
// "Screenshots"): decoded, sized down so its longest side is at most
// MaxSide, and given as a data: URL for an OpenRouter image content part.
// Its bytes live only in memory, for the requests of the turn that took it:
// what is stored of a call is its text and Placeholder.
package images

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"strings"
)

// MaxSide bounds the longest side of an image shown to a model: larger
// screens are sized down, which is what a model's vision reads anyway
// (providers scale larger images down themselves, and pay for them).
const MaxSide = 1280

// PerTurn is how many of a turn's newest images each model request carries.
const PerTurn = 3

// Image is one image sized for a model.
type Image struct {
	MIME string
	Data []byte
	// Width and Height are the sizes as shown to the model.
	Width, Height int
}

// DataURL is the image as an image_url part's url.
func (i Image) DataURL() string {
	return "data:" + i.MIME + ";base64," + base64.StdEncoding.EncodeToString(i.Data)
}

// Placeholder is what the transcript keeps of the image.
func (i Image) Placeholder() string {
	return fmt.Sprintf("[screenshot, %dx%d, not stored]", i.Width, i.Height)
}

// Fit decodes a PNG or JPEG and sizes it down to MaxSide. An image already
// small enough keeps its bytes; a sized-down one is encoded as PNG again
// (text on a screen stays sharp) unless it came as a JPEG.
func Fit(mime string, data []byte) (Image, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return Image{}, fmt.Errorf("the image (%s, %d bytes) is not a PNG or JPEG: %w", mime, len(data), err)
	}
	out := "image/" + format
	w, h := cfg.Width, cfg.Height
	if w <= MaxSide && h <= MaxSide {
		return Image{MIME: out, Data: data, Width: w, Height: h}, nil
	}
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return Image{}, fmt.Errorf("decode the image: %w", err)
	}
	nw, nh := MaxSide, h*MaxSide/w
	if h > w {
		nw, nh = w*MaxSide/h, MaxSide
	}
	dst := scale(src, max(nw, 1), max(nh, 1))
	var buf bytes.Buffer
	if format == "jpeg" {
		err = jpeg.Encode(&buf, dst, &jpeg.Options{Quality: 85})
	} else {
		out = "image/png"
		err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, dst)
	}
	if err != nil {
		return Image{}, fmt.Errorf("encode the sized-down image: %w", err)
	}
	return Image{MIME: out, Data: buf.Bytes(), Width: nw, Height: nh}, nil
}

// scale sizes src down to w x h by averaging the source pixels each target
// pixel covers (a box filter): for a downscale it keeps text legible, where
// picking the nearest pixel drops whole strokes.
func scale(src image.Image, w, h int) *image.RGBA {
	b := src.Bounds()
	sw, sh := b.Dx(), b.Dy()
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		y0, y1 := y*sh/h, max((y+1)*sh/h, y*sh/h+1)
		for x := 0; x < w; x++ {
			x0, x1 := x*sw/w, max((x+1)*sw/w, x*sw/w+1)
			var r, g, bl, a, n uint64
			for sy := y0; sy < y1; sy++ {
				for sx := x0; sx < x1; sx++ {
					cr, cg, cb, ca := src.At(b.Min.X+sx, b.Min.Y+sy).RGBA()
					r, g, bl, a, n = r+uint64(cr), g+uint64(cg), bl+uint64(cb), a+uint64(ca), n+1
				}
			}
			dst.SetRGBA(x, y, color.RGBA{R: uint8(r / n >> 8), G: uint8(g / n >> 8), B: uint8(bl / n >> 8), A: uint8(a / n >> 8)})
		}
	}
	return dst
}

// Raw is an image as a tool or a server answered it.
type Raw struct {
	MIME string
	Data []byte
}

// Attach sizes a call's images for the model and adds each one's
// placeholder to its text; an image that cannot be read is said so in the
// text instead. It returns the text to store and the images' data URLs.
func Attach(text string, raws []Raw) (string, []string) {
	var lines []string
	var urls []string
	for _, r := range raws {
		img, err := Fit(r.MIME, r.Data)
		if err != nil {
			lines = append(lines, fmt.Sprintf("[image, %s, not shown: %v]", r.MIME, err))
			continue
		}
		lines = append(lines, img.Placeholder())
		urls = append(urls, img.DataURL())
	}
	if len(lines) == 0 {
		return text, nil
	}
	if strings.TrimSpace(text) == "" || text == "(the tool returned nothing)" {
		return strings.Join(lines, "\n"), urls
	}
	return text + "\n" + strings.Join(lines, "\n"), urls
}
