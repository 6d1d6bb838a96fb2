package port_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

func TestLinksWatch(t *testing.T) {
	t.Run("a watcher waits for a code and ends with ctx", func(t *testing.T) {
		links := port.NewLinks()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var got []wire.ChannelLinkFrame
		err := links.Watch(ctx, "a/b", func(f wire.ChannelLinkFrame) error { got = append(got, f); return nil })
		if !errors.Is(err, context.DeadlineExceeded) || len(got) != 0 {
			t.Errorf("Watch with nothing to show = %v, %v; want ctx's error and no frame", err, got)
		}
	})
	t.Run("Begin forgets the last link's end", func(t *testing.T) {
		links := port.NewLinks()
		links.For("a/b").Failed("no code was scanned in time")
		links.Begin("a/b")
		links.For("a/b").Code("2@new")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var got []wire.ChannelLinkFrame
		_ = links.Watch(ctx, "a/b", func(f wire.ChannelLinkFrame) error { got = append(got, f); return nil })
		if len(got) != 1 || got[0].Code != "2@new" {
			t.Errorf("after Begin a watcher got %+v, want the new code only", got)
		}
	})
	t.Run("Forget ends a watcher", func(t *testing.T) {
		links := port.NewLinks()
		links.For("a/b").Code("2@c")
		frames := make(chan wire.ChannelLinkFrame, 4)
		done := make(chan error, 1)
		go func() {
			done <- links.Watch(context.Background(), "a/b", func(f wire.ChannelLinkFrame) error { frames <- f; return nil })
		}()
		<-frames
		links.Forget("a/b")
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch after Forget = %v", err)
			}
			if f := <-frames; f.Failed == "" {
				t.Errorf("last frame %+v, want failed", f)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Forget did not end the watcher")
		}
	})
	t.Run("a failing send ends the watch", func(t *testing.T) {
		links := port.NewLinks()
		links.For("a/b").Code("2@c")
		boom := errors.New("the client went away")
		if err := links.Watch(context.Background(), "a/b", func(wire.ChannelLinkFrame) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("Watch = %v, want the send's error", err)
		}
	})
	t.Run("channels are apart", func(t *testing.T) {
		links := port.NewLinks()
		links.For("a/one").Code("2@one")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var got []wire.ChannelLinkFrame
		_ = links.Watch(ctx, "a/two", func(f wire.ChannelLinkFrame) error { got = append(got, f); return nil })
		if len(got) != 0 {
			t.Errorf("another channel's watcher got %+v", got)
		}
	})
}
