package controlplane

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/invisible-dots/invisible-dots/internal/apiserver"
)

// ReadToken is the one reader of config/api.token: its first line, trimmed
// (ref 9.6: every reader goes through one function).
func ReadToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the API token: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	token := strings.TrimSpace(line)
	if len(token) < apiserver.MinTokenLength {
		return "", fmt.Errorf("the API token in %s is shorter than %d characters: put a longer one on its first line, or remove the file to have a new one made", path, apiserver.MinTokenLength)
	}
	return token, nil
}

// ensureToken returns the API token, making one at first start.
func ensureToken(path string) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return "", fmt.Errorf("generate the API token: %w", err)
		}
		token := base64.RawURLEncoding.EncodeToString(raw)
		if err := writeFileExclusive(path, []byte(token+"\n")); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("make %s private: %w", path, err)
	}
	return ReadToken(path)
}

// ensureMasterKey returns the 32-byte key that encrypts Secrets at rest,
// making one at first start. A key of another length is refused rather than
// replaced: replacing it would make every stored Secret unreadable.
func ensureMasterKey(path string) ([]byte, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("generate the master key: %w", err)
		}
		if err := writeFileExclusive(path, key); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("make %s private: %w", path, err)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the master key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("the master key %s holds %d bytes, not 32; restore it from a backup (a new key would make every stored Secret unreadable)", path, len(key))
	}
	return bytes.Clone(key), nil
}

func writeFileExclusive(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
