package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/sse"
)

// ListFiles lists a directory of the Dot namespace/name's home (p absolute,
// relative to the home or ~/...; "" is the home).
func (c *Client) ListFiles(ctx context.Context, namespace, dot, p string) (wire.FileList, error) {
	var out wire.FileList
	err := c.do(ctx, http.MethodGet, wire.FilesListPath(namespace, dot), pathQuery(p), nil, http.StatusOK, &out)
	return out, err
}

// File is a file of a Dot as the API serves it: its bytes, and the type
// and disposition the server gave them (wire.FileTypeOf).
type File struct {
	Data        []byte
	ContentType string
	// Disposition is "inline" or "attachment"; Name the file name it
	// carries.
	Disposition string
	Name        string
	// CSP is the answer's Content-Security-Policy.
	CSP string
}

// ReadFile reads a file of the Dot namespace/name's home, at most
// wire.MaxFileBytes.
func (c *Client) ReadFile(ctx context.Context, namespace, dot, p string) (File, error) {
	resp, data, err := c.get(ctx, wire.FilesPath(namespace, dot), pathQuery(p), wire.MaxFileBytes)
	if err != nil {
		return File{}, err
	}
	f := File{Data: data, ContentType: resp.Header.Get("Content-Type"), CSP: resp.Header.Get("Content-Security-Policy")}
	if disp, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil {
		f.Disposition, f.Name = disp, params["filename"]
	}
	return f, nil
}

// Screenshot reads the Dot namespace/name's desktop as a PNG.
func (c *Client) Screenshot(ctx context.Context, namespace, dot string) ([]byte, error) {
	_, data, err := c.get(ctx, wire.ScreenshotPath(namespace, dot), "", wire.MaxGuestAnswer)
	return data, err
}

// Tools reads the engine's tool table of the Dot namespace/name.
func (c *Client) Tools(ctx context.Context, namespace, dot string) (protocol.Tools, error) {
	var out protocol.Tools
	err := c.do(ctx, http.MethodGet, wire.ToolsPath(namespace, dot), "", nil, http.StatusOK, &out)
	return out, err
}

// Skills reads the skills of the Dot namespace/name.
func (c *Client) Skills(ctx context.Context, namespace, dot string) (protocol.Skills, error) {
	var out protocol.Skills
	err := c.do(ctx, http.MethodGet, wire.SkillsPath(namespace, dot), "", nil, http.StatusOK, &out)
	return out, err
}

// BrowserIdentities lists the browser identities of the Dot namespace/name,
// oldest first.
func (c *Client) BrowserIdentities(ctx context.Context, namespace, dot string) (protocol.BrowserIdentities, error) {
	var out protocol.BrowserIdentities
	err := c.do(ctx, http.MethodGet, wire.BrowserIdentitiesPath(namespace, dot), "", nil, http.StatusOK, &out)
	return out, err
}

// CreateBrowserIdentity creates a browser identity of the Dot. Its proxy, when
// in.Proxy is set, is write-only: no answer says more than hasProxy.
func (c *Client) CreateBrowserIdentity(ctx context.Context, namespace, dot string, in protocol.BrowserIdentityCreate) (protocol.BrowserIdentity, error) {
	var out protocol.BrowserIdentity
	err := c.do(ctx, http.MethodPost, wire.BrowserIdentitiesPath(namespace, dot), "", in, http.StatusCreated, &out)
	return out, err
}

// BrowserIdentity reads one browser identity of the Dot.
func (c *Client) BrowserIdentity(ctx context.Context, namespace, dot, id string) (protocol.BrowserIdentity, error) {
	var out protocol.BrowserIdentity
	err := c.do(ctx, http.MethodGet, wire.BrowserIdentityPath(namespace, dot, id), "", nil, http.StatusOK, &out)
	return out, err
}

// DeleteBrowserIdentity closes a browser identity of the Dot and removes its
// profile.
func (c *Client) DeleteBrowserIdentity(ctx context.Context, namespace, dot, id string) error {
	return c.do(ctx, http.MethodDelete, wire.BrowserIdentityPath(namespace, dot, id), "", nil, http.StatusNoContent, nil)
}

// CloseBrowserIdentity closes the browser of an identity of the Dot; its
// profile stays.
func (c *Client) CloseBrowserIdentity(ctx context.Context, namespace, dot, id string) error {
	return c.do(ctx, http.MethodPost, wire.BrowserClosePath(namespace, dot, id), "", nil, http.StatusNoContent, nil)
}

// BrowserFrame reads one frame of an open identity's window as a JPEG.
func (c *Client) BrowserFrame(ctx context.Context, namespace, dot, id string) ([]byte, error) {
	_, data, err := c.get(ctx, wire.BrowserFramePath(namespace, dot, id), "", wire.MaxGuestAnswer)
	return data, err
}

// MCPSecrets lists the MCP secrets the Dot namespace/name's config names and
// whether each is set.
func (c *Client) MCPSecrets(ctx context.Context, namespace, dot string) (wire.MCPSecrets, error) {
	var out wire.MCPSecrets
	err := c.do(ctx, http.MethodGet, wire.MCPSecretsPath(namespace, dot), "", nil, http.StatusOK, &out)
	return out, err
}

// SetMCPSecret stores the secret name of the Dot's MCP server server; its
// host agent pushes it to a running guest.
func (c *Client) SetMCPSecret(ctx context.Context, namespace, dot, server, name, value string) (wire.MCPSecret, error) {
	var out wire.MCPSecret
	err := c.do(ctx, http.MethodPut, wire.MCPSecretPath(namespace, dot, server, name), "", wire.SetMCPSecret{Value: value}, http.StatusOK, &out)
	return out, err
}

// ClearMCPSecret removes the secret name of the Dot's MCP server server.
func (c *Client) ClearMCPSecret(ctx context.Context, namespace, dot, server, name string) error {
	return c.do(ctx, http.MethodDelete, wire.MCPSecretPath(namespace, dot, server, name), "", nil, http.StatusNoContent, nil)
}

// Usage reads the model spend of the Dot namespace/name.
func (c *Client) Usage(ctx context.Context, namespace, dot string, q wire.UsageQuery) (wire.Usage, error) {
	var out wire.Usage
	err := c.do(ctx, http.MethodGet, wire.UsagePath(namespace, dot), q.Values().Encode(), nil, http.StatusOK, &out)
	return out, err
}

// Health reads the server's health.
func (c *Client) Health(ctx context.Context) (wire.Health, error) {
	var out wire.Health
	err := c.do(ctx, http.MethodGet, wire.HealthPath, "", nil, http.StatusOK, &out)
	return out, err
}

// Doctor runs the doctor of the server's host and reads its report.
func (c *Client) Doctor(ctx context.Context) (wire.DoctorReport, error) {
	var out wire.DoctorReport
	err := c.do(ctx, http.MethodGet, wire.DoctorPath, "", nil, http.StatusOK, &out)
	return out, err
}

func pathQuery(p string) string {
	if p == "" {
		return ""
	}
	return url.Values{protocol.QueryPath: {p}}.Encode()
}

// get reads an answer that is bytes, not JSON: at most limit of them.
func (c *Client) get(ctx context.Context, path, query string, limit int64) (*http.Response, []byte, error) {
	resp, e, err := c.send(ctx, http.MethodGet, path, query, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: read the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, c.failed(e, resp.StatusCode, data)
	}
	if int64(len(data)) > limit {
		return nil, nil, fmt.Errorf("GET %s: the answer is larger than %d bytes", path, limit)
	}
	return resp, data, nil
}

// ChannelKinds lists the channel types the server runs.
func (c *Client) ChannelKinds(ctx context.Context, namespace, dot string) (wire.ChannelKinds, error) {
	var out wire.ChannelKinds
	err := c.do(ctx, http.MethodGet, wire.ChannelsPath(namespace, dot), "", nil, http.StatusOK, &out)
	return out, err
}

// AddChannel links the Dot to a channel account; the service checks the
// credentials first.
func (c *Client) AddChannel(ctx context.Context, namespace, dot string, in wire.ChannelAdd) (wire.ChannelLinked, error) {
	var out wire.ChannelLinked
	err := c.do(ctx, http.MethodPost, wire.ChannelsPath(namespace, dot), "", in, http.StatusCreated, &out)
	return out, err
}

// SetChannelCredentials gives a Channel a new token.
func (c *Client) SetChannelCredentials(ctx context.Context, namespace, dot, channel, token string) (wire.ChannelLinked, error) {
	var out wire.ChannelLinked
	err := c.do(ctx, http.MethodPut, wire.ChannelPath(namespace, dot, channel)+"/credentials", "", wire.ChannelCredentials{Token: token}, http.StatusOK, &out)
	return out, err
}

// PairingCode makes a one-time code that pairs a person with the Channel.
func (c *Client) PairingCode(ctx context.Context, namespace, dot, channel string) (wire.PairingCode, error) {
	var out wire.PairingCode
	err := c.do(ctx, http.MethodPost, wire.ChannelPath(namespace, dot, channel)+"/pairing-codes", "", nil, http.StatusCreated, &out)
	return out, err
}

// Unpair takes a person's pairing with the Channel away.
func (c *Client) Unpair(ctx context.Context, namespace, dot, channel, person string) error {
	return c.do(ctx, http.MethodDelete, wire.ChannelPath(namespace, dot, channel)+"/people/"+url.PathEscape(person), "", nil, http.StatusNoContent, nil)
}

// LinkChannel follows the link of a Channel linked by a code (WhatsApp):
// each frame goes to frame, until linked or failed, or ctx ends.
func (c *Client) LinkChannel(ctx context.Context, namespace, dot, channel string, frame func(wire.ChannelLinkFrame)) error {
	path := wire.ChannelPath(namespace, dot, channel) + "/link"
	resp, e, err := c.send(ctx, http.MethodGet, path, "", nil, func(req *http.Request) {
		req.Header.Set("Accept", "text/event-stream")
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.failed(e, resp.StatusCode, data)
	}
	r := sse.NewReader(resp.Body, 64<<10)
	for {
		m, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the link stream of Channel %s/%s ended before the link did: %w", namespace, channel, err)
		}
		var f wire.ChannelLinkFrame
		if m.TooLarge || json.Unmarshal(m.Data, &f) != nil {
			continue
		}
		frame(f)
		if f.Linked != "" || f.Failed != "" {
			return nil
		}
	}
}
