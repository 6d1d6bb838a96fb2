// Package web holds the web client's files for go:embed. The client is built
// with npm into dist/app (see README.md here); dist/placeholder.html is
// checked in so the embed always matches something and the Go build works on
// a checkout where the client was never built: such a binary serves the
// placeholder, which says how to build the client.
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// App is the files the web server serves at /: the built client, or the
// placeholder page alone (Built false) when it was not built.
func App() (files fs.FS, built bool) {
	app, err := fs.Sub(dist, "dist/app")
	if err == nil {
		if _, err := fs.Stat(app, "index.html"); err == nil {
			return app, true
		}
	}
	return placeholder{}, false
}

// placeholder is a file system whose index.html is dist/placeholder.html.
type placeholder struct{}

func (placeholder) Open(name string) (fs.File, error) {
	if name == "index.html" {
		return dist.Open("dist/placeholder.html")
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}
