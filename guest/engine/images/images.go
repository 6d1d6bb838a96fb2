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
	"image/draw"
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
// small enough keeps its bytes (only its header is read); a sized-down one
// is encoded as PNG again (text on a screen stays sharp) unless it came as a
// JPEG.
//
// What it costs (BenchmarkFit: a 2560x1440 PNG, a 2x downscale to
// 1280x720, about 55-70 ms on this project's 2-core test machines): the
// full decode of 3.7 million pixels into a 14.7 MB image (zlib inflate and
// PNG's row filters, a third of the time and most of the garbage), the box
// filter reading every one of those pixels (a third), and the PNG encode of
// the 0.9 million pixels left (a fifth; deflate at BestSpeed). None of it
// is repeated: the image is decoded once, read in place by the filter
// without a conversion to RGBA when it decoded to RGBA or NRGBA, and
// encoded once. A model reads the result as tokens by its pixel size, not
// its bytes, so a cheaper nearest-pixel sampler would save a part of one
// third at the price of dropped text strokes; it is not worth it.
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
	buf.Grow(len(data) / 2) // about what a quarter of the pixels encodes to
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
// picking the nearest pixel drops whole strokes, and it costs a few
// additions a source pixel, far less than the decoding before it and the
// encoding after it. It reads RGBA and NRGBA bytes in place (a PNG decodes
// to one of them); any other image (a JPEG's YCbCr) is converted to RGBA
// first.
func scale(src image.Image, w, h int) *image.RGBA {
	b := src.Bounds()
	var pix []byte
	var stride int
	premultiply := false
	switch m := src.(type) {
	case *image.RGBA:
		pix, stride = m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride
	case *image.NRGBA:
		// Averaged as they are, the colour of a transparent pixel would
		// count; premultiplied by its alpha (as RGBA holds them) it does
		// not. A screenshot is opaque, where both are the same.
		pix, stride, premultiply = m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride, !m.Opaque()
	default:
		rgba := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(rgba, rgba.Rect, src, b.Min, draw.Src)
		pix, stride = rgba.Pix, rgba.Stride
	}
	sw, sh := b.Dx(), b.Dy()
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		y0, y1 := y*sh/h, max((y+1)*sh/h, y*sh/h+1)
		for x := 0; x < w; x++ {
			x0, x1 := x*sw/w, max((x+1)*sw/w, x*sw/w+1)
			var sum [4]uint32
			for sy := y0; sy < y1; sy++ {
				row := pix[sy*stride+x0*4 : sy*stride+x1*4]
				if premultiply {
					for i := 0; i < len(row); i += 4 {
						a := uint32(row[i+3])
						sum[0] += uint32(row[i]) * a / 255
						sum[1] += uint32(row[i+1]) * a / 255
						sum[2] += uint32(row[i+2]) * a / 255
						sum[3] += a
					}
					continue
				}
				for i := 0; i < len(row); i += 4 {
					sum[0] += uint32(row[i])
					sum[1] += uint32(row[i+1])
					sum[2] += uint32(row[i+2])
					sum[3] += uint32(row[i+3])
				}
			}
			n := uint32((y1 - y0) * (x1 - x0))
			o := y*dst.Stride + x*4
			dst.Pix[o], dst.Pix[o+1], dst.Pix[o+2], dst.Pix[o+3] = uint8(sum[0]/n), uint8(sum[1]/n), uint8(sum[2]/n), uint8(sum[3]/n)
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
