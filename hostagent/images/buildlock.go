package images

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/pidlock"
)

// LockRuntimeBuild takes the home's runtime build lock (ref 3.2
// .runtime-build.lock), which every builder of a runtime ISO holds from the
// check whether its contents are registered to their registration: the
// golden build's and the test image's alike. Another build holding it is
// waited for, and said once through logf; ctx ends the wait.
func LockRuntimeBuild(ctx context.Context, h home.Layout, logf func(string, ...any)) (*pidlock.Lock, error) {
	if err := os.MkdirAll(h.Images(), 0o755); err != nil {
		return nil, fmt.Errorf("make %s: %w", h.Images(), err)
	}
	l, err := pidlock.AcquireWait(ctx, h.RuntimeBuildLock(), pidlock.Options{}, time.Second, func(e *pidlock.HeldError) {
		logf("waiting for another runtime ISO build to finish (%s holds %s)", e.Holder, e.Path)
	})
	if err != nil {
		return nil, fmt.Errorf("take the runtime build lock: %w", err)
	}
	return l, nil
}
